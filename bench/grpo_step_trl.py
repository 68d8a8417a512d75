"""TRL side of bench/grpo_step_trl.sh: GRPOTrainer on the same model, prompts, batch and
settings as the rlhost recipe, timing each generation cycle (one rollout and the
optimiser steps it feeds) the way the recipe reports its steps.

  python3 bench/grpo_step_trl.py MODEL_DIR PROMPTS.jsonl OUT.json --steps 7 --threads 2 \
      --prompts 16 --n 8 --max-new 128 --global-batch 64 --micro-batch 16 --lr 2e-4

OUT.json: {"steps": [{"whole", "rollout", "train"}...], "prompt_ids": [[ids of each group's
prompt] per step], "versions": {...}}. "rollout" is generation plus the reward (what the
recipe's perf/rollout_time holds); "train" is the rest of the cycle: TRL's no-grad pass for
the old log-probs, the forward/backward passes and the optimiser steps.
"""
import argparse
import json
import re
import sys
import tempfile
import time


def gsm8k_number(text):
    """The response's answer: the last \\boxed{}, else the number after the last '####',
    else the last number (rl.rewards.gsm8k's 'auto' order)."""
    def first(s):
        m = re.match(r"[\s$]*(-?[\d,]*\.?\d+)", s)
        return float(m.group(1).replace(",", "")) if m else None

    def last(s):
        nums = re.findall(r"-?[\d,]*\.?\d+", s)
        return float(nums[-1].replace(",", "")) if nums else None

    boxed = re.findall(r"\\boxed\{([^{}]*)\}", text)
    if boxed:
        return first(boxed[-1]) if first(boxed[-1]) is not None else last(boxed[-1])
    if "####" in text:
        return first(text.rsplit("####", 1)[1])
    return last(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("prompts")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompts-per-step", dest="per_step", type=int, default=16)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=128)
    ap.add_argument("--global-batch", type=int, default=64)
    ap.add_argument("--micro-batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--temperature", type=float, default=1.0)
    a = ap.parse_args()

    import torch
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    import transformers
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    rows = [json.loads(l) for l in open(a.prompts)]
    rows = rows[: a.steps * a.per_step]
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": r["question"]}], "answer": r["answer"]}
                            for r in rows])

    def reward(completions, answer, **_):
        out = []
        for c, label in zip(completions, answer):
            text = c[0]["content"] if isinstance(c, list) else c
            target = gsm8k_number(label.rsplit("####", 1)[1] if "####" in label else label)
            pred = gsm8k_number(text)
            out.append(1.0 if pred is not None and target is not None and abs(pred - target) <= 1e-6 else 0.0)
        return out

    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32, attn_implementation="sdpa")
    micro_per_step = a.global_batch // a.micro_batch
    cycle = a.per_step * a.n
    steps_per_gen = cycle // a.micro_batch          # micro-batches per rollout
    opt_steps_per_gen = cycle // a.global_batch     # optimiser steps per rollout
    out_dir = tempfile.mkdtemp(prefix="grpo_trl_")
    cfg = GRPOConfig(
        output_dir=out_dir, per_device_train_batch_size=a.micro_batch, gradient_accumulation_steps=micro_per_step,
        steps_per_generation=steps_per_gen, num_generations=a.n, max_completion_length=a.max_new,
        temperature=a.temperature, top_p=1.0, top_k=0, beta=0.0, epsilon=0.2, loss_type="grpo", scale_rewards="group",
        learning_rate=a.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
        adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
        max_steps=a.steps * opt_steps_per_gen, logging_steps=1, report_to=[], save_strategy="no", eval_strategy="no",
        shuffle_dataset=False, use_cpu=True, bf16=False, fp16=False, dataloader_num_workers=0, seed=42,
        disable_dropout=True, num_iterations=1, mask_truncated_completions=False, log_completions=False)

    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=cfg, train_dataset=ds, processing_class=tok)

    stamps, rollout, prompt_ids = [], [], []
    gen, score = trainer._generate, trainer._calculate_rewards

    def timed_generate(prompts):
        t0 = time.perf_counter()
        r = gen(prompts)
        rollout.append(time.perf_counter() - t0)
        ids = r[0]
        prompt_ids.append([list(map(int, ids[i])) for i in range(0, len(ids), a.n)])
        return r

    def timed_rewards(*args, **kw):
        t0 = time.perf_counter()
        r = score(*args, **kw)
        rollout[-1] += time.perf_counter() - t0
        return r

    trainer._generate, trainer._calculate_rewards = timed_generate, timed_rewards

    class Stamp(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            stamps.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kw):
            stamps.append(time.perf_counter())

    trainer.add_callback(Stamp())
    trainer.train()
    steps = []
    for k in range(a.steps):
        t0, t1 = stamps[k * opt_steps_per_gen], stamps[(k + 1) * opt_steps_per_gen]
        whole = t1 - t0
        steps.append({"whole": whole, "rollout": rollout[k], "train": whole - rollout[k]})
    json.dump({"steps": steps, "prompt_ids": prompt_ids,
               "versions": {"trl": trl.__version__, "transformers": transformers.__version__, "torch": torch.__version__},
               "threads": a.threads}, open(a.out, "w"))
    for k, s in enumerate(steps):
        print(f"TRL step {k}: whole {s['whole']:.3f} s, rollout {s['rollout']:.3f} s, train {s['train']:.3f} s",
              file=sys.stderr)


if __name__ == "__main__":
    main()
