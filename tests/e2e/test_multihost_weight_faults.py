#!/usr/bin/env python3
"""A weight sync to another host's engine that really fails: GRPO jobs on two namespace
hosts as in tests/e2e/test_multihost_engines.py (one engine per host, rank 0 on host 0,
rank 1 on host 1 under srun's variables), host 1's engine stopped (SIGSTOP) in the middle
of step 0's c10d broadcast (--remote-weight-sync-timeout 6 keeps the waits short).

* The fallback: the engine resumes (SIGCONT) once the broadcast has timed out, and the
  controller sends that version over HTTP (no --remote-weights-dir): every step with its
  full batch, both engines at the trainer's version after every sync, the remote engine's
  log-probs the trainer's bit for bit; the next sync goes by broadcast again.
* A stuck engine: it stays stopped through step 0; the sync ends within its timeouts, the
  engine leaves the router and the run goes on with the controller's engine. Resumed, it
  answers the next sync's health probe: that sync refits it (its process never exited,
  so its host did not restart it), and it serves every later step at the trainer's
  version.

* A stalled engine's cost: the sync that meets it ends within the broadcast's timeout,
  the grace its engines' replies get, and one probe / group-leave timeout (the leaves go
  to every engine at once, beside the probe); before, the stalled engine's own request
  timeout, its leave and the probe came one after another (26 s with a 6 s timeout).
  Where the trainer's last bytes were already in the kernel's socket buffers when the
  engine stopped (the trainer's side of the broadcast done), the engines' replies get
  the timeout from then on: the same bound (it was the request's timeout + 10 s, 21 s).
* Under --use-fault-tolerance, host 1's engine stopped (SIGSTOP) while it holds step 2's
  requests: the controller's health probes take it out of the router within two probe
  rounds, the router sends the requests it held to the other engine, and every step
  keeps its full batch; resumed (SIGCONT), the next sync refits it and it serves the later
  steps at the trainer's weight version (each of its samples says so). Killed (-9)
  instead: its host starts a new one, which the next sync refits; full batches again.

The stop lands in the broadcast: host 0's link is slowed (a tc tbf qdisc, 200 kbit/s: the
124 KB of weights take about five seconds) until the engine, whose log says it joined the
weight group, is stopped. (At 1 mbit/s an engine starved of CPU under ctest -j2 for about
a second between forming the group and logging it found every byte already in its socket:
the stop came after the broadcast.) Root (CAP_NET_ADMIN), iproute2's ip and tc are needed: without
them the tests are skipped saying so (a failure under CI=true). Every namespace, link and
process is removed at the end.

    RLHOST_BIN=build/rlhost python3 tests/e2e/test_multihost_weight_faults.py
"""
import json
import os
import re
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import RlhostTestCase, read_jsonl, requires, wait_for  # noqa: E402
import support  # noqa: E402
import netns  # noqa: E402
from test_multihost_engines import N, PROMPTS, WHY_NOT, HostJob, engine_pids, read  # noqa: E402
from test_recipe_grpo import TinyModel  # noqa: E402

TIMEOUT = 6   # --remote-weight-sync-timeout: the broadcast's group and each request
STEPS = 8     # of the stuck engine's run
FAILED = "weight sync to the other hosts' engines (distributed) failed (attempt %d of 2)"
# rl.weight_sync: LEAVE_TIMEOUT (an engine's group leave; the controller's probe before a
# sync has the same 5 s) and REPLY_GRACE (the engines' replies after a failed broadcast)
LEAVE, GRACE = 5, 1
# a stalled engine's sync: the broadcast's timeout, the grace and one probe/leave window
# (they run together), plus 2 s for a busy 2-core machine; the old code took
# TIMEOUT + 10 (its request) + LEAVE + 5 (the probe after) = 26 s
STALLED_SYNC_BOUND = TIMEOUT + GRACE + LEAVE + 2
HC_INTERVAL, HC_TIMEOUT = 1, 2   # --rollout-health-check-interval / --rollout-health-check-timeout
# of the run whose engine stops during a rollout: the signal aims at step 2, and on a loaded
# machine its watcher may come two steps late; the restarted or resumed engine still needs
# a step after its refit to show it serves
RUN_STEPS = 8
# the controller's router in those runs: host 0's loopback (its own namespace), where the
# stop watcher asks which requests it holds
ROUTER_PORT = 30100

# Run in host 0's namespace, for argv[3] s at most: once the engine at argv[1] serves
# weight version argv[4] or a later one (GET /get_model_info: the sync before the step to
# stop in), polls its load (GET /v1/loads) every 10 ms and sends process argv[2] signal
# argv[5] (SIGSTOP, SIGKILL) as soon as it holds a request. With argv[6], the router's URL
# (SIGSTOP only): the stop counts only if the router then holds requests in flight to the
# engine (GET /workers): these tiny generations can end between the load read and the
# signal, and an engine stopped idle holds nothing to send elsewhere; such a stop is
# undone (SIGCONT) at once and the watch goes on. Prints {at, running, missed} (exit 3:
# it never caught one).
SIGNAL_WHEN_BUSY = r"""
import json, os, signal, sys, time, urllib.request
url, pid, end, version = sys.argv[1], int(sys.argv[2]), time.time() + float(sys.argv[3]), int(sys.argv[4])
sig = getattr(signal, sys.argv[5])
router = sys.argv[6] if len(sys.argv) > 6 else None
def get(base, path, key):
    try:
        return json.load(urllib.request.urlopen(base + path, timeout=2))[key]
    except (OSError, ValueError, KeyError):
        return None
def serves():
    v = get(url, "/get_model_info", "weight_version")
    return v is not None and str(v).isdigit() and int(v) >= version
def router_load():
    for w in get(router, "/workers", "workers") or []:
        if str(w.get("url", "")).rstrip("/") == url.rstrip("/"):
            return w.get("load", 0)
    return 0
while time.time() < end and not serves():
    time.sleep(0.01)
missed = 0
while time.time() < end:
    a = get(url, "/v1/loads", "aggregate") or {}
    if a.get("total_reqs", 0) > 0:
        os.kill(pid, sig)
        held = router_load() if router else a["total_reqs"]
        if held > 0:
            print(json.dumps({"at": time.time(), "running": held, "missed": missed}))
            sys.exit(0)
        os.kill(pid, signal.SIGCONT)
        missed += 1
    time.sleep(0.01)
sys.exit(3)
"""


@requires(WHY_NOT is None, "network namespaces", str(WHY_NOT))
class WeightSyncFaults(HostJob, TinyModel, RlhostTestCase):
    tmp_prefix = "rlhost-weight-faults-"

    def slow_link(self, host, on):
        """host's link (what it sends) at 200 kbit/s, or back to full speed."""
        if on:
            argv = ["tc", "qdisc", "add", "dev", host.dev, "root", "tbf", "rate", "200kbit", "burst", "16kb",
                    "limit", "8mb"]
        else:
            argv = ["tc", "qdisc", "del", "dev", host.dev, "root"]
        try:
            r = host.run(argv, capture_output=True, text=True, timeout=30)
        except FileNotFoundError:
            support.missing("iproute2's tc", "apt install iproute2")
        if r.returncode != 0:
            support.missing("a tc tbf qdisc on a namespace's link", "%s: %s (the kernel needs sch_tbf)"
                            % (" ".join(argv), r.stderr.strip()))

    def stop_in_first_broadcast(self, hosts, procs, d):
        """Host 1's engine stopped as soon as its log says it is receiving step 0's weights
        (the controller asks only once every engine answered its join, and the broadcast,
        slowed to about five seconds, is then under way; stopped at its join's log line
        instead, an engine starved of CPU could stop before it answered the join: a stall
        in the join, not the broadcast); → (pid, the engine's log file)."""
        def remote():
            got = [pid for pid, c in engine_pids().items() if hosts[1].addr in c]
            return got or any(p.poll() is not None for p in procs)
        pids = wait_for(remote, timeout=120, what="host 1's engine to start")
        self.assertIsInstance(pids, list, self.logs(d))
        self.assertEqual(len(pids), 1, engine_pids())
        pid = pids[0]
        elog = os.readlink("/proc/%d/fd/2" % pid)

        def receiving():
            return "receiving weights from group" in read(elog) or any(p.poll() is not None for p in procs)
        wait_for(receiving, timeout=120, what="host 1's engine to be receiving the weights")
        os.kill(pid, signal.SIGSTOP)
        self.addCleanup(lambda: support.alive(pid) and os.kill(pid, signal.SIGKILL))
        self.slow_link(hosts[0], False)
        self.assertTrue(all(p.poll() is None for p in procs), self.logs(d))
        self.assertNotIn("weights updated", read(elog), "the stop came after the broadcast")
        return pid, elog

    def say_sync(self, log):
        """The controller's lines about the remote syncs (in the test's output)."""
        keys = ("weight sync to", "out of the router", "joins the router", "failed (attempt")
        print("\n".join(x[-300:] for x in log.splitlines() if any(k in x for k in keys) and "Args parsed" not in x))

    def logs(self, d):
        return "\n".join("--- host %d:\n%s" % (r, read(os.path.join(d, "host%d.log" % r))[-4000:]) for r in range(2))

    def wait_log(self, d, text, procs, timeout):
        path = os.path.join(d, "host0.log")
        wait_for(lambda: text in read(path) or any(p.poll() is not None for p in procs), timeout=timeout,
                 what="host 0's log to say %r" % text)
        self.assertIn(text, read(path), self.logs(d))

    def test_failed_broadcast_falls_back_to_http(self):
        d = os.path.join(self.dir, "fallback")
        os.makedirs(d)
        with netns.Hosts(2) as hosts:
            self.slow_link(hosts[0], True)
            procs = self.start(hosts, d, "--num-rollout", "3", "--remote-weight-sync-timeout", str(TIMEOUT),
                               "--old-logprobs", "check")
            pid, elog = self.stop_in_first_broadcast(hosts, procs, d)
            t0 = time.time()
            try:   # the broadcast times out; the engine resumes before the retry's health probe
                self.wait_log(d, FAILED % 1, procs, timeout=4 * TIMEOUT + 30)
            finally:
                os.kill(pid, signal.SIGCONT)
            took = time.time() - t0
            codes, logs = self.finish(procs, d)
            engine_log = read(elog)
        for r in range(2):
            self.assertEqual(codes[r], 0, "host %d:\n%s" % (r, logs[r][-5000:]))
        self.say_sync(logs[0])
        print("the broadcast failed %.1f s after the stop" % took)
        self.assertLess(took, 2 * TIMEOUT + 20, "the broadcast ends within its timeouts")
        self.assertNotIn(FAILED % 2, logs[0])
        self.assertIn("weight sync to 2 engine(s): memory, http to other hosts", logs[0])
        # the next syncs: a new group, by broadcast again
        self.assertRegex(logs[0].split("memory, http to other hosts", 1)[1],
                         r"weight sync to 2 engine\(s\): memory, distributed to other hosts")
        rows, workers = self.check_steps(d, 3, hosts)
        print("samples per host and step:", workers)
        for x in rows:   # both engines answered every sync with the trainer's version
            self.assertEqual(x["rollout/engines/remote_synced"], 1, x)
            self.assertEqual(x["rollout/engines/versions_agree"], 1, x)
            self.assertEqual(x["rollout/engines/remote_serving"], 1, x)
            self.assertEqual(x["train/train_rollout_logprob_abs_diff"], 0.0, x)
        for step in range(3):
            self.assertGreater(workers[step].get(hosts[1].addr, 0), 0, "step %d: %s" % (step, workers[step]))
        # the engine's own word: step 0's version came over HTTP
        self.assertIn("weights updated over HTTP", engine_log)
        self.assertRegex(engine_log, r"weights updated over HTTP \(.*version %s\)" % rows[0]["rollout/weight_version"])

    def test_engine_stopped_during_the_broadcast(self):
        d = os.path.join(self.dir, "stuck")
        os.makedirs(d)
        with netns.Hosts(2) as hosts:
            self.slow_link(hosts[0], True)
            # each step lasts about 2 s (its rewards wait 1.5 s): the resumed engine rejoins in time
            procs = self.start(hosts, d, "--num-rollout", str(STEPS), "--remote-weight-sync-timeout", str(TIMEOUT),
                               "--old-logprobs", "check", reward_wait=1.5)
            pid, elog = self.stop_in_first_broadcast(hosts, procs, d)
            t0 = time.time()
            try:
                self.wait_log(d, "no answer to /health before the sync", procs, timeout=4 * TIMEOUT + 40)
                took = time.time() - t0
                self.wait_step(d, 0, procs)
            finally:
                os.kill(pid, signal.SIGCONT)
            # resumed, it answers the next sync's probe: that sync refits it, and it serves again
            codes, logs = self.finish(procs, d)
        for r in range(2):
            self.assertEqual(codes[r], 0, "host %d:\n%s" % (r, logs[r][-5000:]))
        self.say_sync(logs[0])
        print("the stopped engine was out %.1f s after the stop; the sync took %.1f s (bound %g s)"
              % (took, rows_sync_time(d), STALLED_SYNC_BOUND))
        self.assertLess(took, 2 * TIMEOUT + 30, "the sync ends within its timeouts")
        self.assertIn(FAILED % 1, logs[0])
        addr = hosts[1].addr.replace(".", "\\.")
        self.assertRegex(logs[0], r"engine 1 of host %s \(\S+\) out of the router: no answer to /health before the "
                         r"sync \(probed again at later syncs\)" % addr)
        self.assertRegex(logs[0], r"engine 1 of host %s \(\S+\) answers again: this sync refits it" % addr)
        self.assertNotRegex(logs[1], r"exited with status", "the engine lived on: its host did not restart it")
        rows, workers = self.check_steps(d, STEPS, hosts)
        print("samples per host and step:", workers)
        print("remote engines synced per step:", [x["rollout/engines/remote_synced"] for x in rows])
        # the stalled engine costs the sync its timeout plus one leave/probe window, not each in turn
        self.assertLess(rows[0]["perf/update_weights_remote_time"], STALLED_SYNC_BOUND)
        self.assertGreater(rows[0]["perf/update_weights_remote_time"], TIMEOUT, "the broadcast did wait its timeout")
        self.assertEqual(rows[0]["rollout/engines/remote_synced"], 0, rows[0])   # step 0's sync left it out
        self.assertEqual(rows[0]["rollout/engines/remote_serving"], 0, rows[0])
        back = [i for i, x in enumerate(rows) if x["rollout/engines/remote_synced"] == 1]
        self.assertTrue(back, "the resumed engine was never refit")
        for x in rows[back[0]:]:   # from its refit on, it serves at the trainer's version
            self.assertEqual(x["rollout/engines/remote_synced"], 1, x)
            self.assertEqual(x["rollout/engines/remote_serving"], 1, x)
            self.assertEqual(x["rollout/engines/versions_agree"], 1, x)
        self.assertGreater(workers[STEPS - 1].get(hosts[1].addr, 0), 0, "the resumed engine serves the last step")
        for x in rows:   # no engine ever served other weights than the trainer's
            self.assertEqual(x["train/train_rollout_logprob_abs_diff"], 0.0, x)

    def signal_in_step_2(self, hosts, d, procs, sig):
        """Host 1's engine gets `sig` as soon as it holds a request once it serves version 2
        (step 2's rollout, what step 1's sync handed out; a later one when the watcher, starved
        on a loaded machine, polls past that one); a stop counts once the router holds
        requests to it (caught idle, it is resumed and watched again); → (pid, url, {at,
        running, missed})."""
        self.wait_step(d, 0, procs)
        pids = [pid for pid, c in engine_pids().items() if hosts[1].addr in c]
        self.assertEqual(len(pids), 1, "%s\n%s" % (engine_pids(), self.logs(d)))
        pid = pids[0]
        self.addCleanup(lambda: support.alive(pid) and os.kill(pid, signal.SIGKILL))
        m = re.search(r"engine 1 of host %s at (http://\S+):" % re.escape(hosts[1].addr), read(os.path.join(d, "host0.log")))
        self.assertTrue(m, self.logs(d))
        router = ["http://127.0.0.1:%d" % ROUTER_PORT] if sig == "SIGSTOP" else []
        w = hosts[0].run([sys.executable, "-c", SIGNAL_WHEN_BUSY, m.group(1), str(pid), "120", "2", sig, *router],
                         capture_output=True, text=True, timeout=150)
        self.assertEqual(w.returncode, 0, "the engine never held a request: %s\n%s" % (w.stderr, self.logs(d)))
        return pid, m.group(1), json.loads(w.stdout)

    def start_tolerant(self, hosts, d):
        # round_robin: a restarted engine gets its share of every step from its refit on
        # (cache_aware may keep a short step's prompts on the engine that has them cached)
        return self.start(hosts, d, "--num-rollout", str(RUN_STEPS), "--use-fault-tolerance", "--router-policy", "round_robin",
                          "--sglang-router-port", str(ROUTER_PORT), "--rollout-health-check-interval", str(HC_INTERVAL),
                          "--rollout-health-check-timeout", str(HC_TIMEOUT), "--rollout-max-response-len", "48",
                          "--old-logprobs", "check", reward_wait=0.5)

    def test_engine_stopped_during_a_rollout(self):
        d = os.path.join(self.dir, "rollout-stop")
        os.makedirs(d)
        with netns.Hosts(2) as hosts:
            procs = self.start_tolerant(hosts, d)
            pid, url, stop = self.signal_in_step_2(hosts, d, procs, "SIGSTOP")
            try:
                self.wait_log(d, "out of the router: 2 health probes in a row failed", procs, timeout=60)
                took = time.time() - stop["at"]
            finally:
                os.kill(pid, signal.SIGCONT)
            codes, logs = self.finish(procs, d)
        for r in range(2):
            self.assertEqual(codes[r], 0, "host %d:\n%s" % (r, logs[r][-5000:]))
        self.say_sync(logs[0])
        print("stopped while the router held %d request(s) to it (%d earlier stop(s) caught it idle and were "
              "undone); out of the router %.1f s after the stop (bound %g s)"
              % (stop["running"], stop["missed"], took, 2 * (HC_INTERVAL + HC_TIMEOUT) + 2))
        addr = re.escape(hosts[1].addr)
        # two failed probe rounds (each at most an interval and a timeout), and the log's own polling
        self.assertLess(took, 2 * (HC_INTERVAL + HC_TIMEOUT) + 2, "benched within two health-check rounds")
        self.assertRegex(logs[0], r"engine 1 of host %s \(%s\): healthy -> suspect: " % (addr, re.escape(url)))
        self.assertRegex(logs[0], r"engine 1 of host %s \(%s\) out of the router: 2 health probes in a row failed "
                         r"\(.*\); the router sends its requests to the other engines \(probed again at later syncs\)"
                         % (addr, re.escape(url)))
        self.assertRegex(logs[0], r"router: \d+ request\(s\) that %s held go to the other workers" % re.escape(url))
        self.assertRegex(logs[0], r"engine 1 of host %s \(%s\) answers again: this sync refits it" % (addr, re.escape(url)))
        self.assertNotRegex(logs[1], r"exited with status", "the engine lived on: its host did not restart it")
        rows, workers = self.check_steps(d, RUN_STEPS, hosts)   # every step with its full batch, no sample twice
        print("samples per host and step:", workers)
        print("remote engines serving per step:", [x["rollout/engines/remote_serving"] for x in rows])
        self.assertEqual(rows[1]["rollout/weight_version"], 2, "step 2's rollout ran under version 2")
        # the rollout it was stopped in (dump k is sampled under rows[k - 1]'s version, the one
        # step k - 1's sync handed out: step 2's, or a later one where the watcher, starved on
        # a loaded machine, missed that one): the requests it held went elsewhere
        short = [k for k in range(2, RUN_STEPS) if workers[k].get(hosts[1].addr, 0) < PROMPTS * N // 2]
        self.assertTrue(short, "no rollout lost the stopped engine's share: %s" % workers)
        # the sync that found it answering again refit it: the step that logged that version
        refit = re.search(r"engine 1 of host %s \(%s\) refit: serves weight version (\S+) \(distributed\); in the router"
                          % (addr, re.escape(url)), logs[0])
        self.assertTrue(refit, "the resumed engine was never refit")
        back = [i for i, x in enumerate(rows) if str(x["rollout/weight_version"]) == refit.group(1)]
        self.assertEqual(len(back), 1, (refit.group(1), [x["rollout/weight_version"] for x in rows]))
        # step back[0]'s sync handed out the refit version: it ran after dump short[0]'s rollout
        self.assertGreaterEqual(back[0], short[0], "refit by a sync after the rollout it was stopped in")
        for x in rows[back[0]:]:   # from its refit on: in the router, at the trainer's version
            self.assertEqual(x["rollout/engines/remote_synced"], 1, x)
            self.assertEqual(x["rollout/engines/remote_serving"], 1, x)
            self.assertEqual(x["rollout/engines/versions_agree"], 1, x)
        for x in rows:
            self.assertEqual(x["train/train_rollout_logprob_abs_diff"], 0.0, x)
        # it serves again: a later step has its samples, each made under that step's weights
        later = [k for k in range(back[0] + 1, RUN_STEPS) if workers[k].get(hosts[1].addr, 0) > 0]
        self.assertTrue(later, "the resumed engine served no later step: %s" % workers)
        for k in later:
            want = str(rows[k - 1]["rollout/weight_version"])
            got = {str(v) for x in self.samples(d, k)
                   if x.get("worker") and "//%s:" % hosts[1].addr in x["worker"] for v in x["versions"]}
            self.assertEqual(got, {want}, "step %d: the remote engine's samples' weight versions" % k)

    def test_engine_killed_during_a_rollout(self):
        # kill -9 under --use-fault-tolerance: the probes bench it (its requests fail at the
        # router and are tried again), its host starts a new one at a new URL, which the
        # next sync refits; the old URL is forgotten
        d = os.path.join(self.dir, "rollout-kill")
        os.makedirs(d)
        with netns.Hosts(2) as hosts:
            procs = self.start_tolerant(hosts, d)
            _, url, kill = self.signal_in_step_2(hosts, d, procs, "SIGKILL")
            codes, logs = self.finish(procs, d)
        for r in range(2):
            self.assertEqual(codes[r], 0, "host %d:\n%s" % (r, logs[r][-5000:]))
        self.say_sync(logs[0])
        print("killed holding %d request(s)" % kill["running"])
        addr = re.escape(hosts[1].addr)
        self.assertRegex(logs[1], r"engine 1 of this host \(%s\) exited with status 137; starting it again" % re.escape(url))
        new = re.search(r"engine 1 of this host serves again at (http://\S+)", logs[1])
        self.assertTrue(new, logs[1][-3000:])
        self.assertRegex(logs[0], r"engine 1 of host %s \(%s\)(, out of the router, forgotten| out of the router): its "
                         r"host restarted it" % (addr, re.escape(url)))
        refit = re.search(r"engine 1 of host %s \(%s\) refit: serves weight version (\S+) \(distributed\); in the router"
                          % (addr, re.escape(new.group(1))), logs[0])
        self.assertTrue(refit, "the restarted engine was never refit")
        rows, workers = self.check_steps(d, RUN_STEPS, hosts)   # every step with its full batch, no sample twice
        print("samples per host and step:", workers)
        back = [i for i, x in enumerate(rows) if str(x["rollout/weight_version"]) == refit.group(1)]
        self.assertEqual(len(back), 1)
        for x in rows[back[0]:]:
            self.assertEqual(x["rollout/engines/remote_serving"], 1, x)
            self.assertEqual(x["rollout/engines/versions_agree"], 1, x)
        # step back[0]'s sync refit it: a later step has its samples (not necessarily the next:
        # a step may be made of groups finished before the refit)
        later = [k for k in range(back[0] + 1, RUN_STEPS) if workers[k].get(hosts[1].addr, 0) > 0]
        self.assertTrue(later, "the restarted engine served no step after its refit (step %d): %s" % (back[0], workers))


def rows_sync_time(d):
    """Step 0's remote sync time (s), from the metrics."""
    for x in read_jsonl(os.path.join(d, "m", "metrics.jsonl")):
        if x.get("rollout/step") == 0:
            return x.get("perf/update_weights_remote_time", float("nan"))
    return float("nan")


if __name__ == "__main__":
    support.main()
