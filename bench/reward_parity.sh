#!/usr/bin/env bash
# Agreement of rl.rewards.math / rl.rewards.deepscaler with slime's own graders
# (grade_answer_verl, get_deepscaler_rule_based_reward) on about 25,000 hard cases:
# hand-built kinds (unit words, floats near integers, Unicode digits, \text{},
# separators, \fbox, unreduced fractions, hex-looking answers, ...), randomised
# renderings of the same values, MATH-style answers and random LaTeX fragments
# (bench/reward_parity_cases.py). slime's code is read from a checkout, never copied.
#   SLIME_DIR=../slime [PYTHON=python3] bench/reward_parity.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD:-$root/build}"
: "${SLIME_DIR:?set SLIME_DIR to a slime checkout (with sympy and pylatexenc importable by \$PYTHON)}"
cases="$(mktemp -t reward_parity.XXXXXX.jsonl)"
trap 'rm -f "$cases"' EXIT
SLIME_DIR="$SLIME_DIR" "${PYTHON:-python3}" "$root/bench/reward_parity.py" "$cases"
"$build/rlhost" --no-control "$root/bench/reward_parity.lua" "$cases" "${SHOWN:-10}"
