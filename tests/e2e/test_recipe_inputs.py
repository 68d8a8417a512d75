#!/usr/bin/env python3
"""`rlhost recipes/grpo_gsm8k.lua` given careless or hostile inputs (issue 40): each is
a usage error (exit 2) naming the flag, file, field or line, with a hint, found before
anything starts — never a crash, a traceback, a hang or a run that fails hours later.

- --sglang-config: a key twice in a flow mapping; more engines than a machine runs; more
  than its memory holds; a 1 MB line of blanks (the YAML reader is linear; its message
  quotes a few dozen bytes); LuaJIT bytecode, whole or damaged, as a .lua config; every
  model frozen.
- --save that cannot be written, checked at the start; --load of a path that is not there.
- numeric flags out of range (--save-interval 0, --lr 1e999, --hang-timeout -1, a
  --fault-injection delay of nan, ...) and a tokenizer larger than the model.

The recipe runs on stories260K with the GSM8K test prompts; none of these runs gets as
far as starting an engine.

    RLHOST_BIN=build/rlhost python3 tests/e2e/test_recipe_inputs.py
"""
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import BIN, SOURCE_DIR, TEST_DATA, RlhostTestCase  # noqa: E402

RECIPE = os.path.join(SOURCE_DIR, "recipes", "grpo_gsm8k.lua")
STORIES = os.path.join(TEST_DATA, "models", "stories260K")
PROMPTS = os.path.join(TEST_DATA, "gsm8k", "train.jsonl")


class RecipeInputs(RlhostTestCase):
    tmp_prefix = "rlhost-inputs-"

    def recipe(self, *extra, model=STORIES, timeout=120):
        """Runs the recipe; returns (exit status, stderr + stdout)."""
        r = subprocess.run([BIN, "--no-control", RECIPE, "--hf-checkpoint", model, "--prompt-data", PROMPTS,
                            "--no-apply-chat-template", "--threads", "1", "--no-progress", "--engine-mode", "process",
                            *extra], capture_output=True, text=True, timeout=timeout, env=self.env, cwd=self.dir)
        return r.returncode, r.stderr + r.stdout

    def refused(self, *extra, want, model=STORIES, timeout=120):
        code, log = self.recipe(*extra, model=model, timeout=timeout)
        self.assertEqual(code, 2, log[-3000:])
        for w in ([want] if isinstance(want, str) else want):
            self.assertIn(w, log)
        self.assertNotIn("stack traceback", log)
        # found before anything started: no engine was launched, no step ran
        self.assertNotIn("engine server: serving", log)
        self.assertNotIn("rollout 0 |", log)
        return log

    def test_engine_groups_config(self):
        cfg = self.write("dup.yaml", "sglang:\n  - name: actor\n    server_groups: [{num_gpus: 1, num_gpus: 1000}]\n")
        self.refused("--sglang-config", cfg, want="--sglang-config %s:3: key 'num_gpus' appears twice" % cfg)
        cfg = self.write("many.yaml", "sglang:\n  - name: actor\n    server_groups: [{num_gpus: 1000}]\n")
        self.refused("--sglang-config", cfg, want=["--sglang-config %s: sglang[1] (actor).server_groups[1].num_gpus: "
                                                   "1000 engines in all" % cfg, "more than the 64", "hint:"])
        self.refused("--num-engines", "1000", want="--num-engines: 1000 engines in all")
        cfg = self.write("mem.yaml", "sglang:\n  - name: actor\n    server_groups: [{num_gpus: 2, overrides: "
                                     "{kv_cache_tokens: 1000000000000}}]\n")
        self.refused("--sglang-config", cfg, want=["2 engine(s) need about", "of memory", "but the machine has",
                                                   "available (hint:"])
        cfg = self.write("frozen.yaml", "sglang:\n  - name: ref\n    update_weights: false\n"
                                        "    server_groups: [{num_gpus: 1}]\n")
        self.refused("--sglang-config", cfg, want="no model takes the trainer's weights: ref is frozen")

    def test_yaml_line_of_blanks_is_read_in_linear_time(self):
        blanks = " " * (1 << 20)   # quadratic, a line like this one took hours
        cfg = self.write("blank.yaml", "sglang:\n  - name: actor" + blanks + "x" + blanks + "\n"
                                       "    server_groups: [{num_gpus: 1}]\n  bad" + blanks + "line: 1\n")
        log = self.refused("--sglang-config", cfg, want="--sglang-config %s:" % cfg, timeout=180)
        self.assertLess(len(log), 20000, "the message quotes a bounded excerpt")

    def test_lua_config_is_text_only(self):
        good = "return { sglang = { { name = 'actor', server_groups = { { num_gpus = 1 } } } } }"
        dumper = self.write("dump.lua", "local f = assert(io.open(arg[1], 'wb'))\n"
                                        "f:write(string.dump(assert(loadstring(arg[2])))); f:close()\n")
        path = os.path.join(self.dir, "bc.lua")
        r = subprocess.run([BIN, "--no-control", dumper, path, good], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(path, "rb") as f:
            chunk = f.read()
        self.refused("--sglang-config", path, want="--sglang-config %s: is LuaJIT bytecode; give the Lua source text"
                     % path)
        for at in (5, len(chunk) // 2, len(chunk) - 3):   # damaged bytecode crashed the process (SIGSEGV)
            bad = bytearray(chunk)
            bad[at] ^= 0x5A
            with open(path, "wb") as f:
                f.write(bytes(bad))
            self.refused("--sglang-config", path, want="is LuaJIT bytecode")
        loop = self.write("loop.lua", "while true do end\n")
        self.refused("--sglang-config", loop, want="Lua instructions without returning")

    def test_save_and_load_are_checked_at_the_start(self):
        not_dir = self.write("file", "x")
        self.refused("--save", not_dir, want=["--save %s: checkpoints cannot be written there" % not_dir, "hint:"])
        self.refused("--save", not_dir + "/sub", want="--save %s/sub: checkpoints cannot be written there" % not_dir)
        self.refused("--save", "/proc/rlhost-no-such-dir/ckpt", want="--save /proc/rlhost-no-such-dir/ckpt: ")
        self.refused("--save-debug-rollout-data", not_dir + "/d/r_{rollout_id}.pt",
                     want="--save-debug-rollout-data %s/d: files cannot be written there" % not_dir)
        missing = os.path.join(self.dir, "no-such-ckpt")
        self.refused("--load", missing, want=["--load %s: no such file or directory" % missing, "hint:"])
        os.makedirs(os.path.join(self.dir, "empty"))
        self.refused("--load", self.dir + "/empty", want="--load %s/empty: holds no checkpoint" % self.dir)
        self.assertFalse(os.path.exists(missing), "nothing created for a refused --load")

    def test_numeric_flags_out_of_range_are_usage_errors(self):
        for flags, want in ((["--save-interval", "0"], "--save-interval must be >= 1"),
                            (["--eval-interval", "0"], "--eval-interval must be >= 1"),
                            (["--global-batch-size", "0"], "--global-batch-size must be >= 1"),
                            (["--max-running-requests", "0"], "--max-running-requests must be >= 1"),
                            (["--lr", "1e999"], "--lr must be > 0 (a finite number; got inf)"),
                            (["--lr", "-1"], "--lr must be > 0"),
                            (["--rollout-top-p", "0"], "--rollout-top-p must be in (0, 1]"),
                            (["--rollout-top-p", "1.5"], "--rollout-top-p must be in (0, 1]"),
                            (["--rollout-temperature", "-1"], "--rollout-temperature must be >= 0"),
                            (["--rollout-top-k", "-2"], "--rollout-top-k must be >= -1"),
                            (["--metrics-port", "70000"], "--metrics-port must be in [0, 65535]"),
                            (["--eps-clip", "-0.1"], "--eps-clip must be >= 0"),
                            (["--hang-timeout", "-1"], "--hang-timeout must be 0 (off) or at least 1 second"),
                            (["--hang-timeout", "0.001"], "--hang-timeout must be 0 (off) or at least 1 second"),
                            (["--use-fault-tolerance", "--fault-injection", "kill:1:1:nan"],
                             "--fault-injection kill:1:1:nan: the delay must be a finite number of seconds >= 0"),
                            (["--use-fault-tolerance", "--fault-injection", "kill:1:1:-5"],
                             "--fault-injection kill:1:1:-5: the delay must be"),
                            (["--use-fault-tolerance", "--fault-injection", "stop:1:2:inf"],
                             "the delay must be a finite number")):
            self.refused(*flags, want=want)

    def test_a_tokenizer_larger_than_the_model_is_refused(self):
        # a model of 300 tokens (weights to match) with stories260K's tokenizer of 512
        model = os.path.join(self.dir, "small-vocab")
        make = ("local cfg = rl.json.decode(io.open(%s):read('*a')) cfg.vocab_size = 300 "
                "assert(rl.model.init { config = cfg, seed = 1, tokenizer = %s, dir = %s })"
                % (json.dumps(os.path.join(STORIES, "config.json")), json.dumps(STORIES), json.dumps(model)))
        r = subprocess.run([BIN, "--no-control", "-e", make], capture_output=True, text=True, timeout=120, env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.refused(model=model, want="--hf-checkpoint %s: its tokenizer has 512 tokens, more than the model's "
                                       "vocab_size 300" % model)
        r = subprocess.run([BIN, "--no-control", "-e",
                            "local e, err = rl.engine.start{model = %s, threads = 1} print(e, err)"
                            % json.dumps(model)], capture_output=True, text=True, timeout=120, env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("has 512 tokens, more than the model's vocab_size 300 (config.json)", r.stdout)


if __name__ == "__main__":
    unittest.main()
