"""tinker-cookbook's minimal loops, unmodified, against `rlhost tinker`: the supervised
loop (`python -m tinker_cookbook.recipes.sl_loop`) trains a LoRA adapter and its loss
falls; the RL loop (`rl_loop`, GRPO-style on GSM8K-format problems graded on \\boxed{})
trains another and its reward rises.

The cookbook runs from its venv (scripts/install_tinker_cookbook.sh, which
scripts/bootstrap.sh --test-deps runs; $RLHOST_COOKBOOK_PYTHON overrides): it pins a
transformers older than the suite's. Without the venv the test is Skipped (a failure under
CI=true). The SDK reaches the server through TINKER_BASE_URL / TINKER_API_KEY.

Nothing here reaches a model hub. The loops name a model and two datasets by their hub
names, and everything is found on disk, in the working directory the loops run in:
- `Qwen/Qwen3-8B-Base` is a link to the base model: the cookbook's get_tokenizer loads a
  local directory of that name, and model_info maps the name to its `role_colon` renderer
  ("User: ...\\n\\nAssistant: ...", plain text, which any tokenizer renders);
  `rlhost tinker --base-model Qwen/Qwen3-8B-Base` serves it under the same name.
- `HuggingFaceH4/no_robots` (sl_loop's data) and `openai/gsm8k` (rl_loop's, config `main`)
  are local dataset folders, which `datasets.load_dataset` reads before asking the hub
  (HF_HUB_OFFLINE=1 and HF_DATASETS_OFFLINE=1 make sure it never asks). They hold the
  default model's own generated GSM8K-format problems: for sl_loop as chats in
  no_robots' layout answered in a style new to the model (the \\boxed{N} alone), for
  rl_loop as GSM8K rows (32 held-out problems, repeated: rl_loop makes one pass over its
  data, so the reward of every step is measured on the same problems).

The base model is the default model (rl.mathgen.default_model()) after BASE_STEPS full
fine-tuning steps on chats in the role_colon format as the cookbook's renderer tokenizes
them, with rl_loop's few-shot example or three problems in a row, and answers ending on
\\boxed{N}, 20% of them wrong (the default model's noisy-label habit, for RL to correct):
tests/e2e/cookbook_base.lua, cached beside the default model (~3 min to build on 2 cores,
once). The default model never produced "User:" or "\\boxed{", so those tokens'
unembedding rows are untrained, and LoRA adapters without the unembedding learnt them
only slowly: sl_loop straight on the default model went from 10.3 to 3.8 nats in 40
steps (measured before rlhost adapted the unembedding, train_unembed).

Measured on the 2-core machine (docs/tinker.md): sl_loop's train_mean_nll 2.04 -> 0.31
in 12 steps; rl_loop's reward/total 0.22 over the first four of 16 steps, 0.35 over the last
four (+0.13; the test wants +0.08). The same run with learning_rate=0 (12 steps): +0.00, a failure.
"""
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import support  # noqa: E402
from support import BIN, read_jsonl  # noqa: E402
from tinker_server import Server, default_model  # noqa: E402

VENV = os.environ.get("RLHOST_COOKBOOK_VENV") or os.path.expanduser("~/.cache/rlhost/tinker-cookbook-venv")
PYTHON = os.environ.get("RLHOST_COOKBOOK_PYTHON") or os.path.join(VENV, "bin", "python")
HAVE_COOKBOOK = os.access(PYTHON, os.X_OK)
HINT = "scripts/install_tinker_cookbook.sh (or scripts/bootstrap.sh --test-deps) installs it in " + VENV

MODEL = "Qwen/Qwen3-8B-Base"   # a name model_info maps to the role_colon renderer
# rl_loop's few-shot example and question suffix (tinker_cookbook/recipes/rl_loop.py)
SUFFIX = " Provide a numerical answer without units, written inside \\boxed{}."
FEW_SHOT = [
    {"role": "user", "content": "How many r's are in strawberry?" + SUFFIX},
    {"role": "assistant", "content": "Let's spell the word out and number all the letters: 1) s 2) t 3) r 4) a "
                                     "5) w 6) b 7) e 8) r 9) r 10) y. We have r's at positions 3, 8, and 9. \\boxed{3}"},
]

# sl_loop: 16 chats a step; rl_loop: 16 problems x 8 samples a step
SL_STEPS, SL_BATCH = 12, 16
RL_STEPS, RL_BATCH, RL_GROUP, RL_PROBLEMS = 16, 16, 8, 32
BASE_STEPS, BASE_PROBLEMS = 120, 4000   # tests/e2e/cookbook_base.lua's steps (32 chats each), its problems
BASE_VERSION = 1                  # bump when the base model's recipe changes (names its cache entry)
HERE = os.path.dirname(os.path.abspath(__file__))


def write_jsonl(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def boxed_chat(problem, final=None):
    """A GSM8K-format problem as a no_robots chat after rl_loop's few-shot example: the
    worked lines, then the final "#### N" as \\boxed{N} (or \\boxed{final})."""
    work, _, value = problem["answer"].rpartition("\n#### ")
    box = " \\boxed{%s}" % (final if final is not None else value.strip())
    return {"messages": FEW_SHOT + [{"role": "user", "content": problem["question"] + SUFFIX},
                                    {"role": "assistant", "content": work + box}]}


def terse_chat(problem):
    """sl_loop's chats: a problem answered in a style new to the base model, the final
    \\boxed{N} alone, without the worked lines."""
    value = problem["answer"].rpartition("#### ")[2].strip()
    return {"messages": [{"role": "user", "content": problem["question"] + SUFFIX},
                         {"role": "assistant", "content": "\\boxed{%s}" % value}]}


def noisy_chats(problems, share=0.2, seed=7):
    """The base model's chats: by turns rl_loop's few-shot example and one problem (as
    rl_loop prompts), and three problems in a row; `share` of the answers end on a wrong
    \\boxed{} (off by 1 to 3), as the default model's SFT answers end on a wrong "#### N"."""
    rng, out = random.Random(seed), []

    def turn(p):
        value = int(p["answer"].rpartition("#### ")[2])
        final = None
        if rng.random() < share:
            d = rng.randint(1, 3)
            final = value - d if value > d and rng.random() < 0.5 else value + d
        return boxed_chat(p, final)["messages"][2:]

    k = 0
    while k < len(problems):
        if len(out) % 2 == 0:
            out.append({"messages": FEW_SHOT + turn(problems[k])})
            k += 1
        else:
            out.append({"messages": sum((turn(p) for p in problems[k:k + 3]), [])})
            k += 3
    return out


def base_model(default_dir):
    """The cached base model: default_dir after BASE_STEPS full fine-tuning steps on noisy
    role_colon chats (tests/e2e/cookbook_base.lua), built when missing."""
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "rlhost")
    dest = os.path.join(cache, "cookbook-base-v%d-from-%s" % (BASE_VERSION, os.path.basename(default_dir)))
    if os.path.exists(os.path.join(dest, "config.json")):
        return dest
    with tempfile.TemporaryDirectory(prefix="cookbook-base-", dir=cache) as tmp:
        train = read_jsonl(os.path.join(default_dir, "data", "train.jsonl"))[:BASE_PROBLEMS]
        chats, ids = os.path.join(tmp, "chats.jsonl"), os.path.join(tmp, "ids.jsonl")
        write_jsonl(chats, noisy_chats(train))
        r = subprocess.run([PYTHON, os.path.join(HERE, "cookbook_render.py"), default_dir, MODEL, chats, ids, "380"],
                           capture_output=True, text=True, timeout=300, env=support.clean_env(HF_HUB_OFFLINE="1"))
        if r.returncode != 0:
            raise AssertionError("rendering the base model's chats failed:\n" + r.stderr[-3000:])
        t0 = time.time()
        r = subprocess.run([BIN, "--no-control", os.path.join(HERE, "cookbook_base.lua"), default_dir,
                            os.path.join(tmp, "model"), ids, str(BASE_STEPS)], capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            raise AssertionError("building the base model failed:\n" + r.stdout[-2000:] + r.stderr[-3000:])
        print("base model: %.0f s\n%s" % (time.time() - t0, r.stdout), file=sys.stderr)
        try:
            os.rename(os.path.join(tmp, "model"), dest)
        except OSError:   # another run put one there first
            if not os.path.exists(os.path.join(dest, "config.json")):
                raise
    return dest


def prepare(work, default_dir, base_dir):
    """The working directory: the base model under its hub name, the two datasets."""
    os.makedirs(os.path.join(work, os.path.dirname(MODEL)))
    os.symlink(base_dir, os.path.join(work, MODEL))
    train = read_jsonl(os.path.join(default_dir, "data", "train.jsonl"))
    held_out = read_jsonl(os.path.join(default_dir, "data", "test.jsonl"))
    sl_rows = train[BASE_PROBLEMS:BASE_PROBLEMS + 2 * SL_STEPS * SL_BATCH]   # not the base model's
    write_jsonl(os.path.join(work, "HuggingFaceH4", "no_robots", "train.jsonl"), [terse_chat(p) for p in sl_rows])
    gsm8k = os.path.join(work, "openai", "gsm8k")
    # rl_loop runs one pass over its data, a batch a step: RL_PROBLEMS problems repeated
    # (epochs), so that every step's reward is measured on the same problems
    rl_rows = [{"question": p["question"], "answer": p["answer"]} for p in held_out[:RL_PROBLEMS]]
    write_jsonl(os.path.join(gsm8k, "main", "train.jsonl"), rl_rows * (RL_STEPS * RL_BATCH // RL_PROBLEMS))
    with open(os.path.join(gsm8k, "README.md"), "w") as f:   # the hub repo's config `main`, as dataset metadata
        f.write("---\nconfigs:\n- config_name: main\n  data_files:\n  - split: train\n    path: main/train.jsonl\n---\n")


@support.requires(HAVE_COOKBOOK, "tinker-cookbook's venv (%s)" % PYTHON, HINT)
class CookbookLoops(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="rlhost-cookbook-")
        cls.work = cls.tmp.name
        default_dir = default_model()
        prepare(cls.work, default_dir, base_model(default_dir))
        cls.server = Server(MODEL, cls.work, cwd=cls.work)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.tmp.cleanup()

    def run_loop(self, recipe, log_path, *args):
        """`python -m tinker_cookbook.recipes.<recipe> key=value...` in the working directory;
        returns its metrics.jsonl rows."""
        env = support.clean_env(TINKER_BASE_URL=self.server.url, TINKER_API_KEY=self.server.key,
                                HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=os.path.join(self.work, "hf"),
                                TOKENIZERS_PARALLELISM="false", WANDB_MODE="disabled")
        cmd = [PYTHON, "-m", "tinker_cookbook.recipes." + recipe, "model_name=" + MODEL, "log_path=" + log_path, *args]
        t0 = time.time()
        r = subprocess.run(cmd, cwd=self.work, env=env, capture_output=True, text=True, timeout=600)
        print("%s: %.0f s" % (recipe, time.time() - t0), file=sys.stderr)
        if r.returncode != 0:
            self.fail("%s failed (%d):\n%s\n--- server log:\n%s" % (" ".join(cmd), r.returncode, r.stderr[-6000:],
                                                                  open(self.server.log.name).read()[-3000:]))
        return read_jsonl(os.path.join(log_path, "metrics.jsonl"))

    def test_sl_loop(self):
        log = os.path.join(self.work, "sl")
        rows = self.run_loop("sl_loop", log, "batch_size=%d" % SL_BATCH, "max_steps=%d" % SL_STEPS,
                             "learning_rate=3e-3", "lora_rank=16", "save_every=5",
                             "train_on_what=last_assistant_message")
        nll = [row["train_mean_nll"] for row in rows]
        print("sl_loop train_mean_nll per step: " + " ".join("%.3f" % x for x in nll), file=sys.stderr)
        self.assertEqual(len(nll), SL_STEPS)
        self.assertLess(sum(nll[-3:]) / 3, 0.6 * sum(nll[:3]) / 3, nll)
        # the cookbook's checkpoints (save_every=5): states at steps 5 and 10, then the final state and sampler
        saved = read_jsonl(os.path.join(log, "checkpoints.jsonl"))
        self.assertEqual([c["name"] for c in saved], ["000005", "000010", "final"], saved)
        self.assertTrue(all(c["state_path"].startswith("tinker://") for c in saved), saved)
        self.assertTrue(saved[-1]["sampler_path"].startswith("tinker://"), saved)

    def test_rl_loop(self):
        log = os.path.join(self.work, "rl")
        rows = self.run_loop("rl_loop", log, "batch_size=%d" % RL_BATCH, "group_size=%d" % RL_GROUP,
                             "max_steps=%d" % RL_STEPS, "max_tokens=64", "learning_rate=2e-3", "lora_rank=16",
                             "save_every=0")
        reward = [row["reward/total"] for row in rows]
        print("rl_loop reward/total per step: " + " ".join("%.3f" % x for x in reward), file=sys.stderr)
        self.assertEqual(len(reward), RL_STEPS)
        first, last = sum(reward[:4]) / 4, sum(reward[-4:]) / 4
        self.assertGreater(first, 0.0, "the base model never answers right: no signal for RL")
        self.assertGreater(last, first + 0.08, reward)
        self.assertTrue(re.match(r"tinker://", read_jsonl(os.path.join(log, "checkpoints.jsonl"))[-1]["sampler_path"]))

if __name__ == "__main__":
    support.main()
