#!/usr/bin/env bash
# Span open+close cost (rl.trace vs a Python span with slime's trace_span
# semantics), GSM8K reward throughput (rl.rewards.gsm8k vs a Python `re`
# grader) and slime's math/deepscaler graders (rl.rewards.math/deepscaler; with
# SLIME_DIR=<a slime checkout> also slime's own, which need sympy and pylatexenc),
# same run, CPU time. (Tracing on vs off over a whole rollout needs the rollout
# loop; not measured here.)
#   SPANS=200000 PASSES=5 [SLIME_DIR=../slime] bench/trace_reward.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD:-$root/build}"
data="${GSM8K:-${RLHOST_TEST_DATA:-$build/test-data}/gsm8k/test.jsonl}"  # tests/data, unpacked by the build
ours="$("$build/rlhost" --no-control "$root/bench/trace_reward.lua" "$data" "${SPANS:-200000}" "${PASSES:-5}" | grep '^RESULT')"
peer="$(${PYTHON:-python3} "$root/bench/trace_reward.py" "$data" "${SPANS:-200000}" "${PASSES:-5}" | grep '^RESULT')"
echo "$ours"; echo "$peer"
python3 - "$ours" "$peer" <<'PY'
import sys
rows = {}
for line in (sys.argv[1] + "\n" + sys.argv[2]).splitlines():
    kv = dict(x.split("=", 1) for x in line.split()[1:])
    rows[(kv["impl"], kv["what"])] = kv
ls, ps = float(rows[("lua", "span")]["ns_per_span"]), float(rows[("python", "span")]["ns_per_span"])
print("span open+close: rlhost %.0f ns, python %.0f ns -> %.1fx cheaper (1/%.0f)" % (ls, ps, ps / ls, ps / ls))
lr = float(rows[("lua", "span_read")]["ns_per_span"])
print("  + building rlhost's records on first read: %.0f ns per span; open+close+read %.0f ns -> %.1fx cheaper"
      % (lr, ls + lr, ps / (ls + lr)))
lr, pr = rows[("lua", "reward")], rows[("python", "reward")]
print("GSM8K reward: rlhost %s/s, python re %s/s -> %.2fx; right answers %s vs %s of %s"
      % (lr["per_s"], pr["per_s"], float(lr["per_s"]) / float(pr["per_s"]), lr["right"], pr["right"], lr["rows"]))
for what in ("math", "deepscaler"):
    lm, pm = rows[("lua", what)], rows.get(("python", what))
    if pm:
        print("slime %s grader: rlhost %s/s, slime %s/s -> %.1fx; right answers %s vs %s of %s"
              % (what, lm["per_s"], pm["per_s"], float(lm["per_s"]) / float(pm["per_s"]), lm["right"], pm["right"], lm["rows"]))
    else:
        print("slime %s grader: rlhost %s/s, right %s of %s (SLIME_DIR unset: no slime figure)"
              % (what, lm["per_s"], lm["right"], lm["rows"]))
PY
