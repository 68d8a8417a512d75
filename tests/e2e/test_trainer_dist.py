#!/usr/bin/env python3
"""Data parallel over processes (`rlhost --nproc N`, rl.dist, the trainer's
gradient all-reduce) and its failure modes.

* 2 ranks on a split of one global batch end with the same weights as 1 process
  on the whole batch (every parameter within 1e-5), the same loss and grad norm,
  and both ranks hold identical weights.
* A rank that dies makes `rlhost --nproc` exit with its status, the other rank
  stopped; a stuck rank makes the others' collective time out with an error naming
  it; WORLD_SIZE without MASTER_PORT and a rendezvous nobody joins fail with errors
  naming them, within the timeout.

Standard library only (safetensors are read by hand).

    RLHOST_BIN=build/rlhost python3 tests/e2e/test_trainer_dist.py
"""
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import BIN, RlhostTestCase  # noqa: E402
import support  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dist_train.lua")


def read_safetensors(path):
    """{name: list of floats} of a float32 safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        a, b = info["data_offsets"]
        out[name] = struct.unpack("<%df" % ((b - a) // 4), data[a:b])
    return out


def max_diff(x, y):
    assert x.keys() == y.keys(), (sorted(x), sorted(y))
    return max(max(abs(p - q) for p, q in zip(x[k], y[k])) for k in x)


def load_json(path):
    with open(path) as f:
        return json.load(f)


def children_of(pid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return out


def open_status(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            return f.read()
    except OSError:
        return "zombie"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LaunchesRanks:
    """run_rlhost: `rlhost --no-control ARGS` with no launcher variables inherited."""

    def run_rlhost(self, args, env=None, timeout=180):
        e = dict(self.env)
        for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
            e.pop(k, None)
        e.update(env or {})
        t0 = time.time()
        p = subprocess.run([BIN, "--no-control"] + args, env=e, capture_output=True, text=True, timeout=timeout)
        return p, time.time() - t0


class DataParallel(LaunchesRanks, RlhostTestCase):
    def test_two_ranks_equal_one_process(self):
        one, two = os.path.join(self.dir, "one"), os.path.join(self.dir, "two")
        os.makedirs(one)
        os.makedirs(two)
        p, _ = self.run_rlhost([SCRIPT, "train", one])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        p, _ = self.run_rlhost(["--nproc", "2", SCRIPT, "train", two])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("[rank 1] rank 1 of 2 trained on 4 samples", p.stdout)
        self.assertIn("[rank 0] rank 0 of 2 trained on 4 samples", p.stdout)

        w1 = read_safetensors(os.path.join(one, "rank0", "model.safetensors"))
        w2 = [read_safetensors(os.path.join(two, "rank%d" % r, "model.safetensors")) for r in range(2)]
        diff = max_diff(w1, w2[0])
        print("1 process vs 2 ranks: max |weight diff| %.3g over %d tensors" % (diff, len(w1)))
        self.assertLessEqual(diff, 1e-5)
        self.assertEqual(max_diff(w2[0], w2[1]), 0.0, "ranks hold identical weights")
        # and training moved them (the comparison is not vacuous)
        m1 = load_json(os.path.join(one, "rank0.json"))
        m2 = [load_json(os.path.join(two, "rank%d.json" % r)) for r in range(2)]
        for s in range(2):
            a, b = m1["steps"][s], m2[0]["steps"][s]
            for k in ("loss", "grad_norm", "pg_loss"):
                self.assertAlmostEqual(a[k], b[k], delta=1e-5, msg="step %d %s" % (s + 1, k))
                self.assertEqual(b[k], m2[1]["steps"][s][k], "ranks report the same %s" % k)
            self.assertEqual(b["global_batch_size"], 8)
        self.assertGreater(m1["steps"][0]["grad_norm"], 0)
        # rl.dist.gather_object: rank 0 holds both ranks' per-sample stats, by rank; the
        # advantages are the ones one process computed for the same samples (whitened
        # over the global batch)
        self.assertEqual(m2[1]["gathered"], False)
        parts = m2[0]["gathered"]
        self.assertEqual([len(p) for p in parts], [4, 4])
        self.assertEqual(len(m1["gathered"][0]), 8)
        adv_one = sorted(s["advantage"] for s in m1["gathered"][0])
        adv_two = sorted(s["advantage"] for p in parts for s in p)
        for a, b in zip(adv_one, adv_two):
            self.assertAlmostEqual(a, b, delta=1e-5)

    def test_two_ranks_train_the_critic_as_one_process(self):
        """PPO with a critic: the critic's gradients are averaged over the ranks like the
        policy's, so 2 ranks end with one process's critic."""
        one, two = os.path.join(self.dir, "one"), os.path.join(self.dir, "two")
        os.makedirs(one)
        os.makedirs(two)
        env = {"DIST_CRITIC": "1"}
        p, _ = self.run_rlhost([SCRIPT, "train", one], env=env)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        p, _ = self.run_rlhost(["--nproc", "2", SCRIPT, "train", two], env=env)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        m1 = load_json(os.path.join(one, "rank0.json"))
        m2 = [load_json(os.path.join(two, "rank%d.json" % r)) for r in range(2)]
        for s in range(2):
            a, b = m1["steps"][s], m2[0]["steps"][s]
            for k in ("value_loss", "critic_grad_norm", "loss", "grad_norm"):
                self.assertAlmostEqual(a[k], b[k], delta=1e-5, msg="step %d %s" % (s + 1, k))
                self.assertEqual(b[k], m2[1]["steps"][s][k], "ranks report the same %s" % k)
        self.assertGreater(m1["steps"][0]["critic_grad_norm"], 0)
        v1, v2 = m1["values"], [m["values"] for m in m2]
        self.assertEqual(v2[0], v2[1], "ranks hold the same critic")
        diff = max(abs(x - y) for a, b in zip(v1, v2[0]) for x, y in zip(a, b))
        print("1 process vs 2 ranks: max |critic value diff| %.3g" % diff)
        self.assertLessEqual(diff, 1e-5)
        w1 = read_safetensors(os.path.join(one, "rank0", "model.safetensors"))
        self.assertLessEqual(max_diff(w1, read_safetensors(os.path.join(two, "rank0", "model.safetensors"))), 1e-5)

    def test_a_dying_rank_stops_the_launch(self):
        # run_rlhost's timeout (120 s) is the guard against a launch that never stops
        p, _ = self.run_rlhost(["--nproc", "2", SCRIPT, "die", self.dir], timeout=120)
        self.assertEqual(p.returncode, 3, p.stdout + p.stderr)
        self.assertIn("rank 1 exited with status 3; stopping the other ranks", p.stderr)

    def test_a_stuck_rank_times_out(self):
        # the barrier's own 2 s timeout ended it (the message says so); run_rlhost's 120 s
        # timeout guards against a hang
        p, _ = self.run_rlhost(["--nproc", "2", SCRIPT, "stall", self.dir], timeout=120)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("barrier (group 'default', rank 0 of 2, timeout 2 s)", p.stderr)
        self.assertIn("rank 0 exited with status 1; stopping the other ranks", p.stderr)

    def test_ctrl_c_reaches_every_rank(self):
        e = dict(self.env)
        for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
            e.pop(k, None)
        p = subprocess.Popen([BIN, "--no-control", "--nproc", "2", SCRIPT, "sleep", self.dir], env=e,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        seen = set()
        while len(seen) < 2:
            line = p.stdout.readline()
            self.assertTrue(line, "the launcher ended before both ranks were ready")
            if "] ready " in line:
                seen.add(line.strip())
        ranks = children_of(p.pid)
        self.assertEqual(len(ranks), 2, ranks)
        p.send_signal(signal.SIGINT)
        p.wait(timeout=60)  # a guard against a hang, not a speed check
        self.assertEqual(p.returncode, 130)
        for pid in ranks:
            self.assertFalse(os.path.exists("/proc/%d" % pid) and "zombie" not in open_status(pid),
                             "rank process %d still running" % pid)

    def test_world_size_without_master_port(self):
        p, _ = self.run_rlhost([SCRIPT, "init", self.dir], env={"WORLD_SIZE": "2", "RANK": "0"})
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("MASTER_PORT is not", p.stderr)

    def test_rendezvous_times_out(self):
        env = {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
        p, _ = self.run_rlhost([SCRIPT, "init", self.dir], env=env)  # its timeout guards a hang
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("rendezvous of 2 ranks", p.stderr)
        self.assertIn("timeout 2 s", p.stderr)

    def test_srun_tasks_are_ranks(self):
        # Two tasks as `srun --ntasks 2 rlhost ...` starts them on one node: Slurm's
        # variables only (no torchrun ones); the master is the step's first node and the
        # port derives from the job id. They train as --nproc 2's ranks do.
        port = None
        for cand in range(29000, 29400):   # a free port 20000 + job id % 20000 can name
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", cand))
                    port = cand
                    break
                except OSError:
                    continue
        self.assertIsNotNone(port)
        two = os.path.join(self.dir, "srun")
        os.makedirs(two)
        e = dict(self.env)
        for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
            e.pop(k, None)
        e.update({"SLURM_JOB_ID": str(port - 20000 + 40000), "SLURM_STEP_ID": "0", "SLURM_NTASKS": "2",
                  "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_TASKS_PER_NODE": "2", "SLURM_STEP_NODELIST": "127.0.0.1",
                  "SLURM_JOB_NODELIST": "127.0.0.1", "SLURM_NODEID": "0"})
        procs = []
        for rank in range(2):
            env = dict(e, SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank))
            procs.append(subprocess.Popen([BIN, "--no-control", SCRIPT, "train", two], env=env, text=True,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        self.procs.extend(procs)
        outs = [p.communicate(timeout=180) for p in procs]
        for rank, (p, (out, err)) in enumerate(zip(procs, outs)):
            self.assertEqual(p.returncode, 0, out + err)
            self.assertIn("rank %d of 2 trained on 4 samples" % rank, out)
            self.assertIn("rlhost: srun task %d of 2 (local %d): RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1 "
                          "and MASTER_PORT=%d from Slurm's variables" % (rank, rank, port), err)
        w = [read_safetensors(os.path.join(two, "rank%d" % r, "model.safetensors")) for r in range(2)]
        self.assertEqual(max_diff(w[0], w[1]), 0.0, "ranks hold identical weights")
        # a bad Slurm variable is an error naming it, before anything runs
        p, _ = self.run_rlhost([SCRIPT, "init", self.dir], env=dict(e, SLURM_PROCID="5", SLURM_LOCALID="0"))
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("SLURM_PROCID='5' is not an integer in [0, 1]", p.stderr)

    def test_nproc_usage(self):
        p, _ = self.run_rlhost(["--nproc", "0", SCRIPT])
        self.assertEqual(p.returncode, 2)
        self.assertIn("--nproc needs a number of ranks >= 1", p.stderr)


if __name__ == "__main__":
    support.main()
