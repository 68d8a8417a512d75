#!/usr/bin/env python3
"""`rlhost recipes/grpo_gsm8k.lua --prompt-data train.parquet` (issue 35): the tiny math
model's problems converted to Parquet (pyarrow for the training set, several row groups;
pandas for the held-out set given as --eval-prompt-data NAME FILE.parquet) train a step
and evaluate, drawing the same prompts as the same run on the JSONL files; a damaged
.parquet is a usage error naming the flag and the file.

Needs pyarrow and pandas in python3 and an rlhost built with the Parquet reader (see
tests/e2e/test_data_parquet.py); without them the test skips, under CI=true it fails.

    RLHOST_BIN=build/rlhost python3 tests/e2e/test_recipe_parquet.py
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import BIN, RlhostTestCase, lua_json, missing, read_jsonl  # noqa: E402
import support  # noqa: E402
from test_data_parquet import MODULE, PEER_HINT, pa, pd, pq  # noqa: E402
from test_recipe_grpo import DUMP_PROMPTS, RECIPE, TinyModel  # noqa: E402


class ParquetRecipe(TinyModel, RlhostTestCase):
    tmp_prefix = "rlhost-grpo-parquet-"

    @classmethod
    def setUpClass(cls):
        if pa is None:
            missing("pyarrow and pandas in python3", PEER_HINT)
        if not os.path.exists(MODULE):
            missing("the Parquet reader (%s)" % MODULE,
                    "rlhost was configured without Arrow C++: run scripts/bootstrap.sh, then reconfigure and rebuild")
        super().setUpClass()

    def run_recipe(self, train, test, *extra):
        return subprocess.run([BIN, "--no-control", RECIPE, "--hf-checkpoint", self.model, "--prompt-data", train,
                               "--eval-prompt-data", "heldout", test, "--eval-interval", "1", "--num-rollout", "1",
                               "--rollout-batch-size", "2", "--n-samples-per-prompt", "4",
                               "--rollout-max-response-len", "12", "--dynamic-sampling-filter", "none",
                               "--threads", "1", "--lr", "1e-3", "--no-progress", "--rollout-shuffle", *extra],
                              capture_output=True, text=True, timeout=240, env=self.env, cwd=self.dir)

    def test_parquet_prompts_train_a_step(self):
        d, data = self.dir, self.model + "/data"
        train, test = d + "/train.parquet", d + "/test.parquet"
        pq.write_table(pa.Table.from_pylist(read_jsonl(data + "/train.jsonl")), train, row_group_size=16)
        self.assertGreater(pq.ParquetFile(train).num_row_groups, 2)
        pd.read_json(data + "/test.jsonl", lines=True, dtype=False).to_parquet(test, row_group_size=3)

        runs = {}
        for name, (tr, te) in {"parquet": (train, test), "jsonl": (data + "/train.jsonl", data + "/test.jsonl")}.items():
            r = self.run_recipe(tr, te, "--metrics-dir", "%s/m_%s" % (d, name),
                                "--save-debug-rollout-data", "%s/dump_%s/rollout_{rollout_id}.pt" % (d, name))
            self.assertEqual(r.returncode, 0, "%s run:\n%s" % (name, r.stderr[-6000:]))
            self.assertIn("with prompts " + tr, r.stderr)
            rows = read_jsonl("%s/m_%s/metrics.jsonl" % (d, name))
            self.assertEqual([m["rollout/step"] for m in rows if "rollout/step" in m], [0])
            step0 = next(m for m in rows if m.get("rollout/step") == 0)
            self.assertIn("train/loss", step0)
            self.assertIn("eval/heldout", rows[0])
            script = self.write("dump.lua", DUMP_PROMPTS)
            runs[name] = [s["prompt"] for s in lua_json(self, script, "%s/dump_%s/rollout_0.pt" % (d, name))]
        self.assertEqual(len(runs["parquet"]), 8)
        self.assertEqual(runs["parquet"], runs["jsonl"])

    def test_damaged_parquet_is_a_usage_error(self):
        bad = self.write("bad.parquet", "question,answer\n")
        ok = self.model + "/data/test.jsonl"
        r = self.run_recipe(bad, ok)
        self.assertEqual(r.returncode, 2, r.stderr[-3000:])
        self.assertIn("--prompt-data", r.stderr)
        self.assertIn(bad + ": not a readable Parquet file", r.stderr)
        self.assertNotIn("stack traceback", r.stderr)
        r = self.run_recipe(self.model + "/data/train.jsonl", bad)
        self.assertEqual(r.returncode, 2, r.stderr[-3000:])
        self.assertIn("--eval-prompt-data heldout", r.stderr)
        self.assertIn(bad, r.stderr)


if __name__ == "__main__":
    support.main()
