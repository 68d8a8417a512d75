#!/usr/bin/env python3
"""slime's surface on `rlhost recipes/grpo_gsm8k.lua` (issue 35): every hook flag takes a Lua
file and replaces its step (each test sees the effect, not only the call); the debug modes,
epochs, batch-size and normalisation flags keep slime's meaning; the router can be reused
or pinned and its metrics have their own port; engines started elsewhere train
(--rollout-external); and a slime launch script's flags run with one "not applicable" line
for each Megatron/Ray/W&B flag and no "unknown option".

The recipe runs on the tiny math model of test_recipe_grpo (built in seconds).

    RLHOST_BIN=build/rlhost python3 tests/e2e/test_recipe_slime_flags.py
"""
import json
import os
import re
import subprocess
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import BIN, SOURCE_DIR, RlhostTestCase, lua_json, read_jsonl, wait_for  # noqa: E402
from test_recipe_grpo import DUMP_PROMPTS, TinyModel  # noqa: E402

RECIPE = os.path.join(SOURCE_DIR, "recipes", "grpo_gsm8k.lua")

# Every hook, each leaving a mark: a line in $HOOK_LOG, and an effect the test checks.
HOOKS = r"""
local M = {}
local VERSION = 1
local function mark(what, extra)
  local f = assert(io.open(os.getenv("HOOK_LOG"), "a"))
  f:write(rl.json.encode { hook = what, extra = extra }, "\n")
  f:close()
end

function M.generate_rollout(args, rollout_id, data_source, evaluation, ro)
  if evaluation then   -- the eval pass too, when no --eval-function-path (slime's default)
    mark("eval_via_rollout_fn", rollout_id)
    local r, m = rl.rollout.Rollout.eval(ro, rollout_id, data_source)
    return r, { ["eval/custom_from_rollout_fn"] = 1 }
  end
  mark("generate_rollout", { rollout_id = rollout_id, version = VERSION })
  if rollout_id == 0 then   -- an edit while the run goes on: the next step takes it
    local path = os.getenv("HOOK_FILE")
    local text = assert(require("rl._fs").read_file(path))
    local f = assert(io.open(path, "w"))
    f:write((text:gsub("local VERSION = 1", "local VERSION = 2")))
    f:close()
  end
  local groups, m = rl.rollout.Rollout.generate_rollout(ro, rollout_id)
  m["rollout/custom_version"] = VERSION
  return groups, m
end

function M.generate(args, sample, params, evaluation, ro)
  local p = {}
  for k, v in pairs(params) do p[k] = v end
  p.max_new_tokens = 3   -- every response at most 3 tokens
  return ro:generate(sample, p)
end

function M.post_process_rewards(args, samples)
  mark("post_process_rewards", #samples)
  local raw, rewards = {}, {}
  for i = 1, #samples do raw[i], rewards[i] = 0.25, 7 end
  return raw, rewards
end

function M.data_source(args, tokenizer)
  mark("data_source", args.rollout_batch_size)
  local ds = rl.data.load(args.prompt_data, { input_key = args.input_key, label_key = args.label_key })
  local first = ds.prompts[1]
  local index = 0
  return {   -- the first prompt, always
    get_samples = function(self, n, k)
      local groups = {}
      for g = 1, n do
        local group = {}
        for j = 1, k do
          local s = first:clone()
          s.group_index, s.index = index, index * k + j - 1
          group[j] = s
        end
        index = index + 1
        groups[g] = group
      end
      return groups
    end,
    size = function() return #ds.prompts end,
    state = function() return { index = index } end,
    load_state = function(self, st) index = st.index end,
  }
end

function M.log_rollout_data(rollout_id, args, samples, extra, seconds)
  mark("log_rollout_data", #samples)
  return true   -- ours only: no default rollout/ metrics
end

function M.log_eval_rollout_data(rollout_id, args, results, extra)
  mark("log_eval_rollout_data", results.heldout and #results.heldout.samples)
  return true
end

function M.dynamic_filter(args, group)
  return { keep = group[1].group_index % 2 == 0, reason = "custom_odd" }
end

function M.sample_filter(args, groups)
  mark("sample_filter", #groups)
  for _, g in ipairs(groups) do g[1].remove_sample = true end
end

function M.all_samples_process(args, groups, data_source)
  mark("all_samples_process", #groups)
end

function M.convert_samples_to_train_data(args, samples)
  mark("convert", #samples)
  local d = { tokens = {}, response_lengths = {}, rewards = {} }
  for i, s in ipairs(samples) do
    d.tokens[i], d.response_lengths[i], d.rewards[i] = s.tokens, s.response_length, (i % 2 == 0) and 1 or -1
  end
  return d
end

function M.eval_only(args, rollout_id, eval_sets, evaluation, ro)
  mark("eval_fn", { rollout_id = rollout_id, evaluation = evaluation })
  local r = rl.rollout.Rollout.eval(ro, rollout_id, eval_sets)
  return r, { ["eval/custom_eval_fn"] = 1 }
end

return M
"""


class SlimeFlags(TinyModel, RlhostTestCase):
    tmp_prefix = "rlhost-slime-flags-"

    def flags(self, *extra, eval_=True):
        m = self.model
        base = ["--hf-checkpoint", m, "--prompt-data", m + "/data/train.jsonl",
                "--rollout-batch-size", "2", "--n-samples-per-prompt", "4", "--rollout-max-response-len", "12",
                "--dynamic-sampling-filter", "none", "--threads", "1", "--lr", "1e-3", "--no-progress",
                "--metrics-dir", self.dir + "/m"]
        if eval_:
            base += ["--eval-prompt-data", "heldout", m + "/data/test.jsonl", "--eval-interval", "2"]
        return base + list(extra)

    def run_recipe(self, *extra, code=0, env=None, eval_=True, timeout=180):
        e = dict(self.env)
        e.update(env or {})
        r = subprocess.run([BIN, "--no-control", RECIPE, *self.flags(*extra, eval_=eval_)], capture_output=True,
                           text=True, timeout=timeout, env=e, cwd=self.dir)
        out = r.stderr + r.stdout
        self.assertEqual(r.returncode, code, out[-6000:])
        self.assertNotIn("stack traceback", out)
        return out

    def steps(self):
        return [m for m in read_jsonl(self.dir + "/m/metrics.jsonl") if "rollout/step" in m]

    def evals(self):
        return [m for m in read_jsonl(self.dir + "/m/metrics.jsonl") if "eval/step" in m]

    def hooks(self):
        path = self.write("hooks.lua", HOOKS)
        log = os.path.join(self.dir, "hooks.jsonl")
        return path, log, {"HOOK_LOG": log, "HOOK_FILE": path}

    def marks(self, log):
        out = {}
        for m in read_jsonl(log):
            out.setdefault(m["hook"], []).append(m.get("extra"))
        return out

    def test_rollout_hooks_replace_their_steps(self):
        path, log, env = self.hooks()
        out = self.run_recipe(
            "--num-rollout", "3",
            "--rollout-function-path", path,                        # FUNCTION defaults to generate_rollout
            "--custom-generate-function-path", path + ":generate",
            "--custom-reward-post-process-path", path,              # post_process_rewards
            "--data-source-path", path + ":data_source",
            "--custom-rollout-log-function-path", path,             # log_rollout_data
            "--custom-eval-rollout-log-function-path", path,        # log_eval_rollout_data
            "--dynamic-sampling-filter-path", path + ":dynamic_filter",
            "--rollout-sample-filter-path", path + ":sample_filter",
            "--rollout-all-samples-process-path", path + ":all_samples_process",
            "--save-debug-rollout-data", self.dir + "/dump/rollout_{rollout_id}.pt", env=env)
        marks = self.marks(log)
        # the rollout function ran each step; its file, edited at step 0, reloaded for step 1
        self.assertEqual([x["rollout_id"] for x in marks["generate_rollout"]], [0, 1, 2])
        self.assertEqual([x["version"] for x in marks["generate_rollout"]], [1, 2, 2])
        self.assertIn("reloaded: version 2", out)
        steps = self.steps()
        self.assertEqual([s["rollout/custom_version"] for s in steps], [1, 2, 2])
        # the eval pass went through the rollout function (evaluation = true), its metric kept
        self.assertEqual(marks["eval_via_rollout_fn"], [0, 2, 3])
        # the default rollout/ metrics gave way to the log hook; eval/ likewise
        self.assertEqual(len(marks["log_rollout_data"]), 3)
        self.assertNotIn("rollout/response_len/mean", steps[0])
        self.assertEqual(len(marks["log_eval_rollout_data"]), 3)
        self.assertNotIn("eval/heldout", self.evals()[0])
        # custom generate: every response at most 3 tokens; the data source: one prompt only
        prompts = set()
        for rid in range(3):
            dump = lua_json(self, self.write("dp.lua", DUMP_PROMPTS), self.dir + "/dump/rollout_%d.pt" % rid)
            prompts |= {d["prompt"] for d in dump}
        self.assertEqual(len(prompts), 1, prompts)
        lens = lua_json(self, self.write("lens.lua", r"""
local d = assert(rl.dump.load(arg[1]))
local out = {}
for i, s in ipairs(d.samples) do
  local gsize
  for _, e in ipairs(s.trace and s.trace.events or {}) do
    if e.name == "generate_and_rm_group" and e.type == "span_start" then gsize = e.attrs and e.attrs.group_size end
  end
  out[i] = { len = s.response_length, group = s.group_index, removed = s.remove_sample or false, group_size = gsize }
end
print(rl.json.encode(out))"""), self.dir + "/dump/rollout_1.pt")
        self.assertTrue(all(x["len"] <= 3 for x in lens), lens)
        self.assertTrue(all(x["group_size"] == 4 for x in lens), lens)   # slime's attr on the group's span
        # the dynamic filter kept the even groups only; the sample filter marked one per group
        self.assertTrue(all(x["group"] % 2 == 0 for x in lens), lens)
        self.assertGreater(steps[0]["rollout/dynamic_filter/drop_custom_odd"], 0)
        self.assertEqual(sum(1 for x in lens if x["removed"]), 2)
        self.assertEqual(marks["sample_filter"], [2, 2, 2])
        self.assertTrue(all(n >= 2 for n in marks["all_samples_process"]))
        # the reward post-process: every trained reward 7 (raw 0.25)
        self.assertEqual(marks["post_process_rewards"], [8, 8, 8])
        self.assertEqual(steps[0]["rollout/rewards"], 7)
        self.assertEqual(marks["data_source"], [2])

    def test_convert_and_eval_function_hooks(self):
        path, log, env = self.hooks()
        self.run_recipe("--num-rollout", "2", "--custom-convert-samples-to-train-data-path",
                        path + ":convert_samples_to_train_data", "--eval-function-path", path + ":eval_only", env=env)
        marks = self.marks(log)
        self.assertEqual(marks["convert"], [8, 8])
        self.assertEqual(self.steps()[0]["rollout/rewards"], 0)   # its ±1 rewards, half each
        self.assertEqual([x["rollout_id"] for x in marks["eval_fn"]], [0, 2])
        self.assertTrue(all(x["evaluation"] for x in marks["eval_fn"]))
        ev = self.evals()
        self.assertEqual(ev[0]["eval/custom_eval_fn"], 1)
        self.assertIn("eval/heldout", ev[0])

    def test_bad_hooks_are_usage_errors(self):
        path, _, env = self.hooks()
        out = self.run_recipe("--rollout-function-path", path + ":nope", code=2, env=env)
        self.assertIn("--rollout-function-path %s:nope: %s defines no function 'nope'" % (path, path), out)
        out = self.run_recipe("--custom-generate-function-path", "slime.rollout.my_gen.generate", code=2)
        self.assertIn("a Python hook; rlhost's hooks are Lua", out)
        out = self.run_recipe("--data-source-path", self.dir + "/missing.lua", code=2)
        self.assertIn("--data-source-path %s/missing.lua:" % self.dir, out)
        broken = self.write("broken.lua", "return { generate = function( }")
        out = self.run_recipe("--custom-generate-function-path", broken, code=2)
        self.assertIn("--custom-generate-function-path " + broken, out)
        # slime's own defaults name rlhost's built-ins
        out = self.run_recipe("--num-rollout", "1", "--rollout-function-path",
                              "slime.rollout.sglang_rollout.generate_rollout", "--data-source-path",
                              "slime.rollout.data_source.RolloutDataSourceWithBuffer", eval_=False)
        self.assertIn("rollout 0 |", out)

    def test_debug_modes(self):
        d = self.dir
        out = self.run_recipe("--num-rollout", "2", "--debug-rollout-only", "--save", d + "/ck",
                              "--save-debug-rollout-data", d + "/dump/rollout_{rollout_id}.pt", eval_=False)
        steps = self.steps()
        self.assertEqual(len(steps), 2)
        self.assertNotIn("train/pg_loss", steps[0])   # generated and logged, never trained
        self.assertNotIn("weight sync", out)
        self.assertIn("rollout/response_len/mean", steps[0])
        out = self.run_recipe("--debug-train-only", code=2)
        self.assertIn("--debug-train-only needs --load-debug-rollout-data: it trains without engines on dumped rollouts", out)
        out = self.run_recipe("--debug-train-only", "--debug-rollout-only", code=2)
        self.assertIn("exclude each other", out)
        os.rename(d + "/m", d + "/m_gen")
        out = self.run_recipe("--num-rollout", "2", "--load-debug-rollout-data", d + "/dump/rollout_{rollout_id}.pt",
                              "--load-debug-rollout-data-subsample", "0.01", "--global-batch-size", "8", eval_=False)
        self.assertNotIn("engine server: serving", out)    # --debug-train-only implied: no engines
        self.assertEqual(self.steps()[0]["train/global_batch_size"], 8)   # k = int(8 * 0.01) = 0 keeps all 8

    def test_epochs_batches_and_normalisation(self):
        n_prompts = sum(1 for _ in open(self.model + "/data/train.jsonl"))
        out = self.run_recipe("--num-epoch", "1", "--rollout-batch-size", str(n_prompts // 2), "--eval-interval",
                              "1000", "--rollout-max-response-len", "2", eval_=False)
        self.assertIn("--num-epoch 1: 2 rollouts of %d prompts" % n_prompts, out)
        self.assertEqual(len(self.steps()), 2)
        os.rename(self.dir + "/m", self.dir + "/m1")
        # one optimiser step of every sample; then no trim: 8 samples at a global batch of 3
        self.run_recipe("--num-rollout", "1", "--use-dynamic-global-batch-size", "--global-batch-size", "3", eval_=False)
        self.assertEqual(self.steps()[0]["train/global_batch_size"], 8)
        os.rename(self.dir + "/m", self.dir + "/m2")
        self.run_recipe("--num-rollout", "1", "--global-batch-size", "3", eval_=False)
        self.assertEqual(self.steps()[0]["rollout/trimmed_samples"], 2)
        os.rename(self.dir + "/m", self.dir + "/m3")
        self.run_recipe("--num-rollout", "1", "--global-batch-size", "3", "--disable-rollout-trim-samples", eval_=False)
        self.assertEqual(self.steps()[0]["rollout/trimmed_samples"], 0)
        os.rename(self.dir + "/m", self.dir + "/m4")
        # raw rewards (a reward of response length parity: not all equal)
        rm = self.write("rm.lua", "return { reward = function(s) return #s.response % 2 end }")
        self.run_recipe("--num-rollout", "1", "--custom-rm-path", rm, "--disable-rewards-normalization", eval_=False)
        st = self.steps()[0]
        self.assertAlmostEqual(st["rollout/rewards"], st["rollout/raw_reward"], places=6)
        os.rename(self.dir + "/m", self.dir + "/m5")
        self.run_recipe("--num-rollout", "1", "--custom-rm-path", rm, eval_=False)
        self.assertAlmostEqual(self.steps()[0]["rollout/rewards"], 0, places=5)   # group means subtracted

    def test_metrics_keys(self):
        rm = self.write("cat.lua", "return { reward = function(s) return { score = 1, kind = 'short' } end }")
        self.run_recipe("--num-rollout", "1", "--custom-rm-path", rm, "--reward-key", "score",
                        "--log-reward-category", "kind", "--dynamic-sampling-filter", "none", eval_=False)
        st = self.steps()[0]
        self.assertEqual(st["rollout/error_cat/short"], 1)
        self.assertEqual(st["rollout/repetition_frac"], 0)
        self.assertEqual(st["rollout/zero_std/count_1.0"], 2)
        self.assertEqual(st["passrate/pass@1"], 1)
        self.assertIn("perf/tokens_per_gpu_per_sec", st)
        self.assertIn("perf/effective_tokens_per_gpu_per_sec", st)

    def test_engines_router_and_log_lines(self):
        port = self.free_port()
        out = self.run_recipe("--num-rollout", "1", "--rollout-num-gpus", "2", "--sglang-router-port", str(port),
                              eval_=False)
        self.assertIn("Router launched at 127.0.0.1:%d, Prometheus port: " % port, out)   # pinned
        self.assertIn("Args parsed: Namespace(", out)
        self.assertRegex(out, r"Ports for engine 0: \{'host': '127.0.0.1', 'port': \d+\}")
        self.assertRegex(out, r"Ports for engine 1: \{'host': '127.0.0.1', 'port': \d+\}")
        self.assertRegex(out, r"Router launched at 127\.0\.0\.1:\d+, Prometheus port: \d+")
        out = self.run_recipe("--rollout-num-gpus", "2", "--rollout-num-gpus-per-engine", "2", code=2)
        self.assertIn("--rollout-num-gpus-per-engine 2: rlhost's engines run on one device each", out)

    def start(self, argv, log_name):
        log = open(os.path.join(self.dir, log_name), "w")
        self.addCleanup(log.close)
        p = subprocess.Popen([BIN, *argv], stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=self.dir)
        self.procs.append(p)
        return p

    def free_port(self):
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    @staticmethod
    def up(url):
        try:
            return urllib.request.urlopen(url, timeout=2).status == 200
        except OSError:
            return False

    def test_router_reused_pinned_and_its_prometheus_port(self):
        port = self.free_port()
        self.env["RLHOST_ADMIN_TOKEN"] = "shared-router-token"   # the router's and the run's (docs/security.md)
        router = self.start(["router", "--port", str(port)], "router.log")
        wait_for(lambda: self.up("http://127.0.0.1:%d/health" % port), timeout=20, what="the router")
        p = self.start([RECIPE, *self.flags("--num-rollout", "100000", eval_=False), "--sglang-router-ip", "127.0.0.1",
                        "--sglang-router-port", str(port), "--router-prometheus-port", str(self.free_port())],
                       "recipe.log")
        wait_for(lambda: os.path.exists(self.dir + "/m/metrics.jsonl") and len(self.steps()) >= 1, timeout=120,
                 what="a step through the running router")
        with open(os.path.join(self.dir, "recipe.log")) as f:
            text = f.read()
        m = re.search(r"Router reused at 127\.0\.0\.1:%d, Prometheus port: (\d+)" % port, text)
        self.assertTrue(m, text[-3000:])
        workers = json.load(urllib.request.urlopen("http://127.0.0.1:%d/workers" % port, timeout=5))["workers"]
        self.assertEqual(len(workers), 1)   # our engine, registered with the router we were given
        body = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % m.group(1), timeout=5).read().decode()
        self.assertIn("router", body)
        p.terminate()
        p.wait(timeout=60)
        workers = json.load(urllib.request.urlopen("http://127.0.0.1:%d/workers" % port, timeout=5))["workers"]
        self.assertEqual(workers, [], "the run took its engine out of the router it was lent")
        self.assertIsNone(router.poll(), "the reused router keeps running")

    def test_rollout_external_engine(self):
        port = self.free_port()
        env = dict(self.env, RLHOST_ADMIN_TOKEN="external-test-token")
        log = open(os.path.join(self.dir, "engine.log"), "w")
        self.addCleanup(log.close)
        eng = subprocess.Popen([BIN, "engine", "--model", self.model, "--port", str(port), "--threads", "1"],
                               stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.dir)
        self.procs.append(eng)
        out = self.run_recipe("--num-rollout", "2", "--rollout-external", "--rollout-external-engine-addrs",
                              "127.0.0.1:%d" % port, "--check-weight-update-equal", eval_=False,
                              env={"RLHOST_ADMIN_TOKEN": "external-test-token"})
        self.assertIn("external engine 0: http://127.0.0.1:%d (native" % port, out)
        self.assertNotIn("engine server: serving", out)   # it started none of its own
        self.assertIn("weight sync to 1 engine(s): shm", out)   # on this machine: shared memory
        steps = self.steps()
        self.assertEqual(len(steps), 2)
        self.assertEqual(steps[-1]["rollout/weight_version"], 2)   # the external engine took each sync
        info = json.load(urllib.request.urlopen("http://127.0.0.1:%d/get_model_info" % port, timeout=5))
        self.assertEqual(str(info.get("weight_version")), "2")
        self.assertIsNone(eng.poll(), "rlhost leaves an external engine running")
        out = self.run_recipe("--rollout-external", code=2)
        self.assertIn("--rollout-external needs --rollout-external-engine-addrs", out)
        out = self.run_recipe("--rollout-external", "--rollout-external-engine-addrs", "nohost", code=2)
        self.assertIn("'nohost' is not HOST:PORT", out)

    def test_seed_scripts(self):
        """The seeds' launch lines, on this machine's paths. 000 (the trace viewer): dumps with
        --save-debug-rollout-data; 002 (SGLang profiling): slime's sleep rollout keeps engines and
        router up, the router's line and /workers as its tools read them. (003, vime's script, runs
        against real vLLM engines: tests/vllm/test_vllm_recipe.py.)"""
        out = self.run_recipe("--num-rollout", "2", "--save-debug-rollout-data", self.dir + "/debug/rollout_{rollout_id}.pt",
                              eval_=False)
        self.assertNotIn("unknown option", out)
        self.assertTrue(os.path.exists(self.dir + "/debug/rollout_1.pt"))
        for path in ("slime.rollout.sleep_rollout.sleep", "vime.rollout.sleep_rollout.sleep"):
            log_name = path.split(".")[0] + ".log"
            p = self.start([RECIPE, *self.flags(eval_=False), "--rollout-function-path", path], log_name)
            text = ""

            def ready():
                nonlocal text
                with open(os.path.join(self.dir, log_name)) as f:
                    text = f.read()
                return re.search(r"Router launched at ([\d.]+:\d+), Prometheus port: \d+", text)
            m = wait_for(ready, timeout=60, what="the router's line")
            wait_for(lambda: ready() and "rollout sleep: engines and router stay up" in text, timeout=60,
                     what="the sleep")
            router = "http://" + m.group(1)
            workers = json.load(urllib.request.urlopen(router + "/workers", timeout=5))["workers"]
            self.assertEqual(len(workers), 1, text)
            p.send_signal(2)
            self.assertEqual(p.wait(timeout=60), 0, text[-3000:])   # a sleep ends cleanly on Ctrl-C
            self.assertNotIn("rollout 0 |", text)   # asleep: no step ran

    def test_slime_launch_script_flags(self):
        """The seeds' vime/slime example (sleep rollout aside), on this machine's paths: every flag is
        rlhost's own or a not-applicable line; 2 steps run."""
        m = self.model
        out = self.run_recipe(
            "--train-backend", "megatron", "--colocate", "--actor-num-nodes", "1", "--actor-num-gpus-per-node", "1",
            "--rollout-num-gpus", "1", "--rollout-num-gpus-per-engine", "1", "--ref-load", m, "--input-key", "question",
            "--label-key", "answer", "--apply-chat-template", "--rm-type", "deepscaler", "--num-rollout", "2",
            "--global-batch-size", "8", "--swiglu", "--num-layers", "1", "--hidden-size", "32",
            "--tensor-model-parallel-size", "1", "--sequence-parallel", "--recompute-granularity", "full",
            "--optimizer", "adam", "--lr-decay-style", "constant", "--attention-dropout", "0.0",
            "--accumulate-allreduce-grads-in-fp32", "--sglang-mem-fraction-static", "0.7", "--use-wandb",
            "--wandb-project", "p", "--wandb-key", "secret-wandb-key", eval_=False)
        self.assertNotIn("unknown option", out)
        for flag in ("--actor-num-nodes", "--swiglu", "--num-layers", "--tensor-model-parallel-size",
                     "--sequence-parallel", "--optimizer", "--attention-dropout",
                     "--ref-load", "--sglang-mem-fraction-static", "--use-wandb", "--wandb-project", "--wandb-key"):
            self.assertEqual(len(re.findall(re.escape(flag) + r": not applicable in rlhost: ", out)), 1, flag)
        self.assertIn("--train-backend megatron: rlhost trains with its own trainer", out)
        # Megatron's recompute flags are rlhost's own: the trainer recomputes its layers
        self.assertIn("trainer: activation recomputation (recompute_granularity full): every layer, in groups of 1", out)
        self.assertNotIn("secret-wandb-key", out, "secrets stay out of the log")
        self.assertEqual(len(self.steps()), 2)


if __name__ == "__main__":
    unittest.main()
