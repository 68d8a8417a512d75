#!/usr/bin/env bash
# tinker-cookbook (PyPI) in its own virtualenv, for tests/e2e/test_tinker_cookbook.py,
# which runs its sl_loop and rl_loop recipes unmodified against `rlhost tinker`.
# Idempotent; prints the venv's python on success.
#   RLHOST_COOKBOOK_VENV   where the venv lives (default ~/.cache/rlhost/tinker-cookbook-venv)
# Why a venv: tinker-cookbook 0.6.x requires tml-renderers>=0.4.1, which PyPI does not
# offer, so 0.5.8 is the newest that installs; it pins transformers<=5.5.4, older than
# the one the rest of the suite tests. The venv sees the system's packages
# (--system-site-packages: torch, tinker, numpy, pyarrow are reused, not downloaded
# again) and holds only what the cookbook needs on top or pins differently.
set -euo pipefail
COOKBOOK_VERSION="${RLHOST_COOKBOOK_VERSION:-0.5.8}"
venv="${RLHOST_COOKBOOK_VENV:-$HOME/.cache/rlhost/tinker-cookbook-venv}"
PY="${PYTHON:-python3}"
py="$venv/bin/python"
log() { printf '[install_tinker_cookbook] %s\n' "$*" >&2; }

# A marker written after the last step: an interrupted install is redone.
marker="$venv/.rlhost-tinker-cookbook-$COOKBOOK_VERSION"
if [ -x "$py" ] && [ -f "$marker" ]; then
  echo "$py"; exit 0
fi
"$PY" -c "import torch, tinker" 2>/dev/null || {
  log "ERROR: $PY lacks torch or tinker (scripts/bootstrap.sh --test-deps installs them); the venv reuses them"
  exit 1
}
log "installing tinker-cookbook $COOKBOOK_VERSION into $venv (~1 min)"
"$PY" -m venv --system-site-packages "$venv"
# The cookbook, its requirements and its math-rl extra (rl_loop grades with sympy,
# pylatexenc, math-verify); transformers is pinned inside the venv only.
"$py" -m pip install -q --disable-pip-version-check "tinker-cookbook[math-rl]==$COOKBOOK_VERSION" "transformers==5.5.4"
"$py" - >&2 <<'PY'
import importlib.metadata as md
import tinker_cookbook.recipes.rl_loop, tinker_cookbook.recipes.sl_loop  # noqa: F401
print("tinker-cookbook", md.version("tinker-cookbook"), "transformers", md.version("transformers"),
      "tinker", md.version("tinker"), "datasets", md.version("datasets"))
PY
touch "$marker"
echo "$py"
