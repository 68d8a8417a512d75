"""Shared by the vLLM tests (tests/vllm/test_*.py, ctest label `vllm`).

They run a real vLLM (CPU) from the venv scripts/install_vllm.sh makes
($RLHOST_VLLM_PYTHON, else ~/.cache/rlhost/vllm-venv/bin/python) and are skipped
(ctest: Skipped, through support.main's exit code) only when that python is missing;
under CI=true that fails.
"""
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
from support import BIN, SOURCE_DIR, TEST_DATA, RlhostTestCase, clean_env  # noqa: E402,F401
import support  # noqa: E402

VENV = os.environ.get("RLHOST_VLLM_VENV") or os.path.expanduser("~/.cache/rlhost/vllm-venv")
PYTHON = os.environ.get("RLHOST_VLLM_PYTHON") or os.path.join(VENV, "bin", "python")


def require_vllm():
    """A skip (under CI=true a failure) when vLLM's python is missing."""
    if not os.access(PYTHON, os.X_OK):
        support.missing("vllm test: no vLLM python at %s" % PYTHON,
                        "scripts/install_vllm.sh (or scripts/bootstrap.sh --test-deps) installs it")


def default_model(env):
    """The default model's directory (rl.mathgen.default_model(): built and cached on first use)."""
    script = os.path.join(HERE, "default_model.lua")
    r = subprocess.run([BIN, "--no-control", script], capture_output=True, text=True, env=env, timeout=1800)
    if r.returncode != 0:
        raise AssertionError("default model: %s\n%s" % (r.returncode, r.stderr))
    return r.stdout.strip().splitlines()[-1]


def group_alive(pgid):
    """True while any process of the process group `pgid` exists."""
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def wait_group_gone(pgid, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        if not group_alive(pgid):
            return True
        time.sleep(0.2)
    return False


def kill_group(pgid):
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
