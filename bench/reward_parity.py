"""slime's side of bench/reward_parity.sh: grades the hard cases of reward_parity_cases.py
with slime's own graders (from the checkout named by $SLIME_DIR; needs sympy and
pylatexenc) and writes them with the verdicts as JSONL: `math` and `deepscaler` on the
boxed-answer sets, `dapo` (math_dapo_utils.compute_score: score and pred) on the
"Answer:" sets.
    SLIME_DIR=../slime python3 bench/reward_parity.py OUT.jsonl"""
import json
import logging
import os
import signal
import sys
import warnings

warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)   # pylatexenc's warnings on odd LaTeX
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
slime = os.environ.get("SLIME_DIR")
if not slime:
    sys.exit("reward_parity.py: set SLIME_DIR to a slime checkout (slime/rollout/rm_hub/math_utils.py)")
sys.path.insert(0, slime)
from slime.rollout.rm_hub.deepscaler import get_deepscaler_rule_based_reward  # noqa: E402
from slime.rollout.rm_hub.math_utils import grade_answer_verl  # noqa: E402
from slime.rollout.rm_hub.math_dapo_utils import compute_score as dapo_score  # noqa: E402

import reward_parity_cases  # noqa: E402


class Timeout(Exception):
    pass


def on_alarm(*_):
    raise Timeout()


def verdict(fn):
    signal.alarm(10)   # sympy can take long on odd text; such a case is left out
    try:
        return fn()
    except Timeout:
        return None
    except Exception as e:  # slime raising is a verdict too
        return "error:" + type(e).__name__
    finally:
        signal.alarm(0)


signal.signal(signal.SIGALRM, on_alarm)
with open(sys.argv[1], "w") as out:
    for name, rows in reward_parity_cases.sets().items():
        for r in rows:
            m = verdict(lambda: 1 if grade_answer_verl(r["response"], r["label"]) else 0)
            d = verdict(lambda: get_deepscaler_rule_based_reward(r["response"], r["label"]))
            out.write(json.dumps({"set": name, **r, "math": m, "deepscaler": d}, ensure_ascii=False) + "\n")
    for name, rows in reward_parity_cases.dapo_sets().items():
        for r in rows:
            d = verdict(lambda: dapo_score(r["response"], r["label"]))
            row = {"set": name, **r}
            if isinstance(d, dict):
                row["dapo"], row["dapo_pred"] = d["score"], d["pred"]
            else:
                row["dapo"] = d
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
