#!/usr/bin/env bash
# The main job: sets up this machine (idempotent), builds, and runs the main
# recipe. Arguments are passed to the recipe (try --help).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
main_recipe="${RLHOST_MAIN_RECIPE:-$root/recipes/grpo_gsm8k.lua}"
"$root/scripts/bootstrap.sh"
RLHOST_BUILD_TARGET="${RLHOST_BUILD_TARGET:-runtime}" "$root/scripts/build.sh" >&2   # no tests: scripts/test.sh builds them
exec "${RLHOST_BUILD_DIR:-$root/build}/rlhost" "$main_recipe" "$@"
