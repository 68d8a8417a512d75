#!/usr/bin/env bash
# One call on a lent GPU machine (bench/README.md, "GPU checks in one command"): from the
# project root, with the workplace's GPU kit copied to .gpu/ (git-ignored) and, optionally,
#   .gpu/prebuilt/{bin/rlhost,lib/rlhost/librlhost_torch.so}  a build made elsewhere against
#       the machine's torch version (tried first; built here with the kit when it does not load)
#   .gpu/default-math-model-v2  the default model, so the machine does not spend its time building it
# Runs bench/gpu/check.sh (STEPS, DEADLINE, T_* pass through) and leaves in $OUT the summary
# and one archive of every log (the device tool brings back few files).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
out="${OUT:-$root/bench/out}"
work="$(mktemp -d)"
t0=$SECONDS
D=/opt/rlhost-deps
[ -d "$D/usr" ] || bash .gpu/setup_deps.sh .gpu/debs "$D" > "$work/deps.log" 2>&1
sp="$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')"
nv="$(ls -d "$sp"/nvidia/*/lib 2>/dev/null | tr '\n' ':')"
export LD_LIBRARY_PATH="$D/usr/lib/x86_64-linux-gnu:$D/lib/x86_64-linux-gnu:$sp/torch/lib:${nv}${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
echo "torch: $(python3 -c 'import torch; print(torch.__version__)')"

build=""
if [ -x .gpu/prebuilt/bin/rlhost ]; then
  export RLHOST_LUA_DIR="$root/lua"
  if .gpu/prebuilt/bin/rlhost -e 'print("cuda_available=" .. tostring(rl.torch.info().cuda_available))' \
      > "$work/prebuilt.log" 2>&1 && grep -q 'cuda_available=true' "$work/prebuilt.log"; then
    build="$root/.gpu/prebuilt/bin"
    echo "using the prebuilt rlhost ($((SECONDS - t0)) s)"
  else
    echo "the prebuilt rlhost does not load here:"; tail -n 5 "$work/prebuilt.log"
    unset RLHOST_LUA_DIR
  fi
fi
if [ -z "$build" ]; then
  bash .gpu/build.sh build-gpu > "$work/build.log" 2>&1 || { tail -n 40 "$work/build.log"; exit 1; }
  tail -n 1 "$work/build.log"
  build="$root/build-gpu"
fi
if [ -d .gpu/default-math-model-v2 ]; then
  mkdir -p ~/.cache/rlhost && cp -r .gpu/default-math-model-v2 ~/.cache/rlhost/
fi
DEVICE=cuda BUILD="$build" OUT="$work/gpu" bash bench/gpu/check.sh
rc=$?
mkdir -p "$out"
cp "$work/gpu/summary.md" "$out/" 2>/dev/null
[ -f "$work/gpu/decode.log" ] && tail -n 8 "$work/gpu/decode.log"
tar -czf "$out/logs.tar.gz" -C "$work" --exclude='*.trace.json*' --exclude='torch_*.json' . 2>/dev/null
# one trace of each kind, for a look in Perfetto
t="$(ls "$work"/gpu/decode/traces/rlhost_b64*.trace.json.gz 2>/dev/null | head -n 1)"
[ -n "$t" ] && cp "$t" "$out/rlhost_b64.trace.json.gz"
echo "device_run: ${SECONDS}s in all"
exit $rc
