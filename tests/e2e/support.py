"""Scaffolding shared by the end-to-end tests (tests/e2e/test_*.py).

Not a test module itself (CMake runs tests/e2e/test_*.py): the test files put
their own folder on sys.path and `import support`.

    RLHOST_BIN         the rlhost binary (made absolute here, so a test may run
                       it from any working directory)
    RLHOST_SOURCE_DIR  the source tree (default: two levels above this file)
    RLHOST_TEST_DATA   the test data: tests/data as the build unpacks it
                       (default: build/test-data in the source tree)
    CI                 "true" (CI sets it, .ci/run exports it): a missing peer or tool
                       fails the test (see missing()) instead of skipping it

Skips: a test that cannot run calls missing(what, hint); main() (what every test file
runs) exits SKIP_EXIT when something was skipped and nothing failed, which ctest
(SKIP_RETURN_CODE, tests/CMakeLists.txt) shows as Skipped, never Passed.

Python standard library only.
"""
import json
import os
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

_bin = os.environ.get("RLHOST_BIN", "")
BIN = os.path.abspath(_bin) if _bin else ""
SOURCE_DIR = os.path.abspath(
    os.environ.get("RLHOST_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")))
COUNTER = os.path.join(SOURCE_DIR, "recipes", "counter.lua")
# Test data (models, tokenizers, GSM8K): tests/data unpacked by the build into
# <build>/test-data; RLHOST_TEST_DATA (ctest sets it), else build/test-data.
TEST_DATA = os.path.abspath(os.environ.get("RLHOST_TEST_DATA", os.path.join(SOURCE_DIR, "build", "test-data")))
TIMEOUT = 30
# ctest's SKIP_RETURN_CODE for every test (the automake convention).
SKIP_EXIT = 77
CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def missing(what, hint):
    """A peer or tool the test needs is missing: `what` names it, `hint` says how to
    install it. Under CI=true the test fails with that text; otherwise it is skipped with
    it (and main() makes ctest show the file as Skipped)."""
    msg = "%s: %s" % (what, hint)
    if CI:
        raise AssertionError("CI=true and a test peer is missing: " + msg)
    raise unittest.SkipTest(msg)


def requires(available, what, hint):
    """Class decorator: when `available` is false, the class's tests do not run and
    missing(what, hint) decides (a skip, or under CI=true a failure)."""
    def deco(cls):
        if not available:
            def setUpClass(klass):
                missing(what, hint)
            cls.setUpClass = classmethod(setUpClass)
        return cls
    return deco


# How to get each Python peer of the tests (scripts/bootstrap.sh --test-deps installs them all).
PIP_HINT = "pip install %s, or scripts/bootstrap.sh --test-deps"


def main(hard_exit=False):
    """unittest.main for a test file: exit 0 when every test passed, 1 when one failed or
    erred, SKIP_EXIT when some were skipped and none failed (each skip and its reason
    printed last). Under CI=true a skip is a failure, whatever raised it.
    hard_exit: leave by os._exit once the outcome is printed, skipping the interpreter's
    finalisation (for files whose peer SDK leaves threads behind that can abort it)."""
    prog = unittest.main(verbosity=2, exit=False)
    r = prog.result
    code = 0
    if not r.wasSuccessful():
        code = 1
    elif r.skipped:
        print("\n%d of %d tests skipped:" % (len(r.skipped), r.testsRun), file=sys.stderr)
        for test, reason in r.skipped:
            print("  SKIPPED %s: %s" % (test.id(), reason), file=sys.stderr)
        if CI:
            print("CI=true: a skipped test fails the run", file=sys.stderr)
        code = 1 if CI else SKIP_EXIT
    if hard_exit:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def clean_env(**extra):
    """The caller's environment without the rlhost knobs a test did not ask for."""
    env = dict(os.environ)
    for k in ("RLHOST_LOG_LEVEL", "RLHOST_CONTROL_TOKEN", "RLHOST_ADMIN_TOKEN"):
        env.pop(k, None)
    env.update(extra)
    return env


def wait_for(pred, timeout=10, what="condition"):
    """Polls pred() until it returns something true, and returns that."""
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))


def alive(pid):
    """True while process `pid` exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def frozen_group_config(ref_model=None, ref_engines=1, ref_backend=None):
    """--sglang-config text: the policy group 'actor' (2 engines, synced) and a frozen group
    'ref' (update_weights: false) serving ref_model (default: the policy's model)."""
    ref = ["  - name: ref", "    update_weights: false"]
    if ref_model:
        ref.append("    model_path: %s" % ref_model)
    if ref_backend:
        ref.append("    backend: %s" % ref_backend)
    ref.append("    server_groups: [{num_gpus: %d}]" % ref_engines)
    return "\n".join(["sglang:", "  - name: actor", "    server_groups: [{num_gpus: 2}]", *ref]) + "\n"


def read_jsonl(path):
    """The rows of a JSONL file (a metrics.jsonl)."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def lua_json(case, script, *args):
    """Runs a Lua `script` (a path) with the rlhost binary and decodes the JSON it prints."""
    r = subprocess.run([BIN, "--no-control", script, *args], capture_output=True, text=True, timeout=60)
    case.assertEqual(r.returncode, 0, r.stderr)
    return json.loads(r.stdout)


class RlhostTestCase(unittest.TestCase):
    """A private temporary directory (self.dir) and environment (self.env:
    clean_env() with its own XDG_RUNTIME_DIR, so `attach --list` and `attach`
    without a target only see this test's processes, and no REPL history; its
    own admin token, RLHOST_ADMIN_TOKEN, which self.admin sends as the control
    endpoints want); processes added to self.procs are killed in tearDown."""

    tmp_prefix = "rlhost-test-"

    def setUp(self):
        if not BIN or not os.access(BIN, os.X_OK):
            self.fail("RLHOST_BIN must name the rlhost binary (got %r)" % BIN)
        self._tmp = tempfile.TemporaryDirectory(prefix=self.tmp_prefix)
        self.dir = self._tmp.name
        self.admin_token = "test-admin-" + os.urandom(12).hex()
        self.admin = {"Authorization": "Bearer " + self.admin_token}
        self.env = clean_env(XDG_RUNTIME_DIR=os.path.join(self.dir, "xdg"), RLHOST_HISTORY="",
                             RLHOST_ADMIN_TOKEN=self.admin_token)
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            try:
                p.communicate(timeout=10)
            except Exception:
                pass
        self._tmp.cleanup()

    def write(self, name, text):
        """Writes dedented `text` to DIR/name (creating folders); returns the path."""
        path = os.path.join(self.dir, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(textwrap.dedent(text))
        return path

    def start_counter(self, host_args=None, interval="0.02", env=None):
        """Starts recipes/counter.lua in DIR; host_args None means --control DIR/counter.sock.
        Returns (process, that socket path)."""
        sock = os.path.join(self.dir, "counter.sock")
        args = [BIN, *host_args] if host_args is not None else [BIN, "--control", sock]
        p = subprocess.Popen([*args, COUNTER, "--interval", interval], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env or self.env, cwd=self.dir)
        self.procs.append(p)
        return p, sock

    def wait_socket(self, proc, path):
        """Waits for `path` to exist and, when it is a Unix socket, to accept a connection
        (the file appears at bind(), before listen(): a repeat run once connected in
        between and was refused); fails at once if `proc` exits first."""
        def ready():
            if proc.poll() is not None:
                out, err = proc.communicate()
                raise AssertionError("rlhost exited early (%s)\n%s\n%s" % (proc.returncode, out, err))
            try:
                st = os.stat(path)
            except FileNotFoundError:
                return False
            if not stat.S_ISSOCK(st.st_mode):
                return True
            with socket.socket(socket.AF_UNIX) as s:
                try:
                    s.connect(path)
                except (ConnectionRefusedError, FileNotFoundError):
                    return False
            return True
        wait_for(ready, what="control socket " + path)
