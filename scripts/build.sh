#!/usr/bin/env bash
# Configures and builds rlhost out of tree (default: ./build, CPU-only).
#   RLHOST_BUILD_DIR=dir  RLHOST_CUDA=ON|OFF|AUTO  RLHOST_BUILD_TYPE=RelWithDebInfo (-O2 -g1: line
#   tables only, CMakeLists.txt says why)
#   RLHOST_BUILD_TARGET=runtime: only what running needs (the binary and its modules, no
#   tests or benchmarks; scripts/run.sh's choice); default: everything
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${RLHOST_BUILD_DIR:-$root/build}"
jobs="${RLHOST_JOBS:-$(nproc)}"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE="${RLHOST_BUILD_TYPE:-RelWithDebInfo}" \
    -DRLHOST_CUDA="${RLHOST_CUDA:-OFF}" "$@"
fi
if [ -n "${RLHOST_BUILD_TARGET:-}" ]; then
  cmake --build "$build" -j "$jobs" --target "$RLHOST_BUILD_TARGET"
else
  cmake --build "$build" -j "$jobs"
fi
