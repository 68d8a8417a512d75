# Sourced by the benchmarks that time on a shared machine (fsdp_memory.sh, lora_memory.sh).
# Busy share of all cores over 2 s (/proc/stat), in percent.
busy_pct() {
  local a b
  a=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat)
  sleep 2
  b=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat)
  awk -v a="$a" -v b="$b" 'BEGIN { split(a, x, " "); split(b, y, " "); d = y[2] - x[2]; printf "%d", (d > 0 ? 100 * (y[1] - x[1]) / d : 0) }'
}

# Timings on a shared machine: wait (up to IDLE_WAIT s, 60) until other processes use
# under 25% of the cores before a job starts; the table reports what they took during it.
wait_idle() {
  local waited=0 b
  while b=$(busy_pct); ((b >= 25 && waited < ${IDLE_WAIT:-60})); do
    ((waited == 0)) && echo "   (machine ${b}% busy: waiting up to ${IDLE_WAIT:-60} s for it to settle)"
    waited=$((waited + 2))
  done
  ((waited > 0)) && echo "   (started at ${b}% busy after ${waited} s)"
  return 0
}
