#!/usr/bin/env python3
"""Across hosts: each "host" is a network namespace this test makes (tests/e2e/netns.py:
its own address on a bridge, 198.18.0.0/24), and its ranks are started as `srun` starts
tasks (Slurm's variables only: rlhost derives torchrun's, MASTER_ADDR from the node list).

* Trainer data parallel across two hosts over Gloo on the bridge: both ranks end with
  identical weights, equal to two ranks on one host (`rlhost --nproc 2`) within 1e-6.
* The GRPO recipe across two hosts: rank 0 (engines, router, rollout) on host 0, rank 1
  training its share on host 1; three steps, both ranks exit 0 with the same train metrics.

Root (CAP_NET_ADMIN) and iproute2 are needed: without them the tests are skipped saying
so (a failure under CI=true). Every namespace and link is removed at the end.

    RLHOST_BIN=build/rlhost python3 tests/e2e/test_multihost.py
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import BIN, SOURCE_DIR, RlhostTestCase, read_jsonl, requires  # noqa: E402
import support  # noqa: E402
import netns  # noqa: E402
from test_recipe_grpo import TinyModel  # noqa: E402
from test_trainer_dist import SCRIPT, max_diff, read_safetensors  # noqa: E402

LAUNCH_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")


def srun_env(base, hosts, rank, job_id=4242):
    """What srun gives task `rank` of a step with one task on each host."""
    e = {k: v for k, v in base.items() if k not in LAUNCH_VARS and not k.startswith("SLURM_")}
    e.update({"SLURM_JOB_ID": str(job_id), "SLURM_STEP_ID": "0", "SLURM_NTASKS": str(len(hosts)),
              "SLURM_STEP_NUM_TASKS": str(len(hosts)), "SLURM_STEP_TASKS_PER_NODE": "1(x%d)" % len(hosts),
              "SLURM_STEP_NODELIST": ",".join(h.addr for h in hosts), "SLURM_PROCID": str(rank),
              "SLURM_LOCALID": "0", "SLURM_NODEID": str(rank), "GLOO_SOCKET_IFNAME": hosts[rank].dev})
    return e


WHY_NOT = netns.available()


@requires(WHY_NOT is None, "network namespaces", str(WHY_NOT))
class TwoHosts(TinyModel, RlhostTestCase):
    tmp_prefix = "rlhost-multihost-"

    def run_on(self, hosts, argv_of, timeout=240, env=None):
        """argv_of(rank) on each host at once; (code, stdout, stderr) per rank."""
        procs = []
        for r, h in enumerate(hosts):
            procs.append(h.popen([BIN, "--no-control", *argv_of(r)], env=dict(srun_env(self.env, hosts, r), **(env or {})),
                                 text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=self.dir))
        self.procs.extend(procs)
        outs = [p.communicate(timeout=timeout) for p in procs]
        return [(p.returncode, o, e) for p, (o, e) in zip(procs, outs)]

    def test_data_parallel_across_two_hosts(self):
        two_hosts, one_host = os.path.join(self.dir, "hosts"), os.path.join(self.dir, "local")
        os.makedirs(two_hosts)
        os.makedirs(one_host)
        with netns.Hosts(2) as hosts:
            res = self.run_on(hosts, lambda r: [SCRIPT, "train", two_hosts])
        for r, (code, out, err) in enumerate(res):
            self.assertEqual(code, 0, out + err)
            self.assertIn("rank %d of 2 trained on 4 samples" % r, out)
            self.assertIn("MASTER_ADDR=%s.1" % netns.NET, err)
        p = subprocess.run([BIN, "--no-control", "--nproc", "2", SCRIPT, "train", one_host], capture_output=True,
                           text=True, timeout=180, env={k: v for k, v in self.env.items() if k not in LAUNCH_VARS})
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        w = [read_safetensors(os.path.join(two_hosts, "rank%d" % r, "model.safetensors")) for r in range(2)]
        local = read_safetensors(os.path.join(one_host, "rank0", "model.safetensors"))
        self.assertEqual(max_diff(w[0], w[1]), 0.0, "the two hosts hold identical weights")
        diff = max_diff(w[0], local)
        print("two hosts vs two local ranks: max |weight diff| %.3g" % diff)
        self.assertLessEqual(diff, 1e-6)

    def test_sharded_training_across_two_hosts(self):
        # --train-backend fsdp's trainer across the namespace network: the same step as
        # two local ranks, and a checkpoint each host writes its optimizer shard of.
        out, ck = os.path.join(self.dir, "fsdp"), os.path.join(self.dir, "ckpt")
        os.makedirs(out)
        with netns.Hosts(2) as hosts:
            res = self.run_on(hosts, lambda r: [SCRIPT, "train", out, "fsdp"], env={"DIST_SAVE": ck})
        for code, o, e in res:
            self.assertEqual(code, 0, o + e[-4000:])
        local = os.path.join(self.dir, "local")
        os.makedirs(local)
        p = subprocess.run([BIN, "--no-control", "--nproc", "2", SCRIPT, "train", local, "fsdp"], capture_output=True,
                           text=True, timeout=180, env={k: v for k, v in self.env.items() if k not in LAUNCH_VARS})
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        diff = max_diff(read_safetensors(os.path.join(out, "rank0", "model.safetensors")),
                        read_safetensors(os.path.join(local, "rank0", "model.safetensors")))
        print("sharded, two hosts vs two local ranks: max |weight diff| %.3g" % diff)
        self.assertLessEqual(diff, 1e-6)
        for r in range(2):
            self.assertTrue(os.path.exists(os.path.join(ck, "iter_0000002", "optimizer.shard_%d_of_2.pt" % r)))

    def test_torchrun_across_two_hosts(self):
        # The real launcher: one torchrun agent per host, c10d rendezvous on host 0's
        # address; the workers join the agents' store (TORCHELASTIC_USE_AGENT_STORE), under
        # their own key prefix.
        torchrun = shutil.which("torchrun")
        if not torchrun:
            support.missing("torchrun", "pip install torch (scripts/bootstrap.sh --test-deps)")
        out = os.path.join(self.dir, "torchrun")
        os.makedirs(out)
        env = {k: v for k, v in self.env.items() if k not in LAUNCH_VARS and not k.startswith("SLURM_")}
        with netns.Hosts(2) as hosts:
            procs = []
            for i, h in enumerate(hosts):
                # is_host: host 0 serves the rendezvous (torchrun cannot tell from a
                # namespace's address, the machine's hostname being shared)
                argv = [torchrun, "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                        "--rdzv-endpoint", hosts[0].addr + ":29400", "--rdzv-id", "rlhost-test", "--local-addr", h.addr,
                        "--rdzv-conf", "is_host=%d" % (i == 0),
                        "--max-restarts", "0", "--no-python", BIN, "--no-control", SCRIPT, "train", out]
                procs.append(h.popen(argv, env=dict(env, GLOO_SOCKET_IFNAME=h.dev), text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=self.dir))
            self.procs.extend(procs)
            res = [p.communicate(timeout=240) for p in procs]
        for p, (o, e) in zip(procs, res):
            self.assertEqual(p.returncode, 0, o + e[-4000:])
        said = "".join(o for o, _ in res)
        for r in range(2):
            self.assertIn("rank %d of 2 trained on 4 samples" % r, said)
        w = [read_safetensors(os.path.join(out, "rank%d" % r, "model.safetensors")) for r in range(2)]
        self.assertEqual(max_diff(w[0], w[1]), 0.0, "the two hosts hold identical weights")

    def test_grpo_recipe_across_two_hosts(self):
        m = self.model
        rm = self.write("reward.lua", "return { reward = function(s) return #s.response % 2 end }\n")
        flags = ["--custom-rm-path", rm + ":reward", "--hf-checkpoint", m, "--prompt-data", m + "/data/train.jsonl", "--rollout-batch-size", "2",
                 "--n-samples-per-prompt", "4", "--rollout-max-response-len", "12", "--dynamic-sampling-filter", "none",
                 "--threads", "1", "--lr", "1e-3", "--no-progress", "--num-rollout", "3", "--dist-timeout", "120"]
        with netns.Hosts(2) as hosts:
            res = self.run_on(hosts, lambda r: [os.path.join(SOURCE_DIR, "recipes", "grpo_gsm8k.lua"), *flags,
                                                "--metrics-dir", os.path.join(self.dir, "m%d" % r)])
        for r, (code, out, err) in enumerate(res):
            self.assertEqual(code, 0, "rank %d\n%s\n%s" % (r, out, err[-4000:]))
        rows = [x for x in read_jsonl(os.path.join(self.dir, "m0", "metrics.jsonl")) if "rollout/step" in x]
        self.assertEqual([x["rollout/step"] for x in rows], [0, 1, 2])
        for x in rows:   # both ranks' samples were trained: the step's batch is 2 × 4 samples
            self.assertEqual(x["train/global_batch_size"], 8, x)
            self.assertEqual(x["train/replica_weights_equal"], 1, "bitwise-equal replicas after every step")
        self.assertGreater(max(x["train/grad_norm"] for x in rows), 0, "the steps moved the weights")


if __name__ == "__main__":
    support.main()
