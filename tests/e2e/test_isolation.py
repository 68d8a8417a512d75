"""Local-user isolation and process lifecycle, probed as another user of the same
machine would, and with the signals supervisors send.

* A second local user (created with useradd when missing, driven with setpriv)
  gets 401 from the engine's and the router's control endpoints, learns nothing
  about paths from them, and cannot read the saved admin token; the owner gets
  through with it, and bad profile ids / worker URLs are refused.
* The static file server (rl.http.serve's static_dir, the trace viewer's) serves
  regular files under its folder only: no NUL truncation, no symlink out.
* SIGKILL, SIGTERM and an error in a run that started process-mode engines, a
  process-mode router and a side process leave no process behind.

The second-user tests are skipped (ctest: Skipped, with the reason and how to fix it)
only where a second user cannot exist: not root, or no useradd/setpriv/curl; under
CI=true that is a failure. Missing test data fails, never skips.
"""
import http.client
import json
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import support  # noqa: E402
from support import BIN, RlhostTestCase, wait_for  # noqa: E402
from engine_support import STORIES, Engine  # noqa: E402

INTRUDER = "rlhost-intruder"
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "router_worker.py")


def intruder_ids():
    """(uid, gid) of a second local user, created when missing."""
    if os.geteuid() != 0:
        support.missing("root: a second local user needs root to create and switch to (running as uid %d)"
                        % os.geteuid(), "run the test as root (CI does)")
    for tool, pkg in (("useradd", "passwd"), ("setpriv", "util-linux"), ("curl", "curl")):
        if not shutil.which(tool):
            support.missing("%s is not installed: cannot act as a second local user" % tool,
                            "apt-get install %s (Debian)" % pkg)
    try:
        pw = pwd.getpwnam(INTRUDER)
    except KeyError:
        r = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", INTRUDER],
                           capture_output=True, text=True)
        if r.returncode != 0 and "exists" not in r.stderr:
            support.missing("a second local user: useradd %s failed: %s" % (INTRUDER, r.stderr.strip()),
                            "check that useradd works here (root, a writable /etc/passwd)")
        pw = pwd.getpwnam(INTRUDER)
    return pw.pw_uid, pw.pw_gid


def as_intruder(*argv):
    uid, gid = intruder_ids()
    return subprocess.run(["setpriv", "--reuid", str(uid), "--regid", str(gid), "--clear-groups", "--", *argv],
                          capture_output=True, text=True, timeout=60, cwd="/",
                          env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/"})


def curl_as_intruder(method, url, body=None, headers=()):
    """(status, body text) of one request sent by the other user."""
    argv = ["curl", "-sS", "--max-time", "30", "-o", "-", "-w", "\n%{http_code}", "-X", method, url]
    if body is not None:
        argv += ["-H", "Content-Type: application/json", "--data-binary", json.dumps(body)]
    for h in headers:
        argv += ["-H", h]
    r = as_intruder(*argv)
    if r.returncode != 0:
        raise AssertionError("curl as %s failed (%d): %s" % (INTRUDER, r.returncode, r.stderr))
    text, _, code = r.stdout.rpartition("\n")
    return int(code), text


def raw_get(url, path):
    """(status, body) for a path sent exactly as given."""
    u = urllib.parse.urlsplit(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    c.putrequest("GET", path, skip_accept_encoding=True)
    c.endheaders()
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


def proc_state(pid):
    """The /proc state letter of pid, or None when it no longer exists."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def gone(pid):
    return proc_state(pid) in (None, "Z", "X")  # an orphan's zombie waits for init: it runs no more


class OtherUserAgainstEngine(RlhostTestCase):
    tmp_prefix = "rlhost-isolation-"

    def setUp(self):
        super().setUp()
        intruder_ids()
        # A folder only root may read: the attacker wants its listing, or to write into it.
        self.secret = tempfile.mkdtemp(prefix="rlhost-secret-")
        os.chmod(self.secret, 0o700)
        with open(os.path.join(self.secret, "payroll-2026.xlsx"), "w") as f:
            f.write("x")
        self.addCleanup(shutil.rmtree, self.secret, True)
        # No inherited token: `rlhost engine` makes one and says where it saved it.
        self.eng = Engine(env={"RLHOST_ADMIN_TOKEN": ""})
        self.addCleanup(self.eng.stop)

    def token_file(self):
        m = re.search(r"\$\(cat (\S+\.admin-token)\)", self.eng.output())
        self.assertIsNotNone(m, self.eng.output())
        return m.group(1)

    def test_control_endpoints_refuse_another_user(self):
        url = self.eng.url
        for path, body in [("/release_memory_occupation", {}),
                           ("/update_weights_from_disk", {"model_path": self.secret}),
                           ("/start_profile", {"output_dir": self.secret, "profile_id": "../pwned"}),
                           ("/abort_request", {"abort_all": True}),
                           ("/flush_cache", None),
                           ("/init_weights_shm", {})]:
            st, text = curl_as_intruder("POST", url + path, body)
            self.assertEqual(st, 401, (path, text))
            self.assertNotIn("payroll", text)  # the folder's listing does not leak
            self.assertNotIn("no such directory", text)
        st, text = curl_as_intruder("POST", url + "/flush_cache", headers=["Authorization: Bearer guessed"])
        self.assertEqual(st, 401, text)
        self.assertEqual(os.listdir(self.secret), ["payroll-2026.xlsx"])
        self.assertFalse(any(n.startswith("pwned") for n in os.listdir(os.path.dirname(self.secret))))
        self.assertFalse(self.eng.get("/get_server_info")[1]["internal_states"][0]["memory_released"])
        # What peers use stays open on loopback (as SGLang's clients and the router expect).
        self.assertEqual(curl_as_intruder("GET", url + "/health")[0], 200)
        st, text = curl_as_intruder("POST", url + "/generate",
                                    {"text": "Once", "sampling_params": {"max_new_tokens": 2}})
        self.assertEqual(st, 200, text)
        # The saved token: the owner's alone.
        path = self.token_file()
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode), 0o700)
        r = as_intruder("cat", path)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("Permission denied", r.stderr)

    def test_owner_with_the_token_and_profile_paths_confined(self):
        with open(self.token_file()) as f:
            self.eng.admin_token = f.read().strip()
        self.assertEqual(self.eng.post("/flush_cache", auth=False)[0], 401)
        self.assertEqual(self.eng.post("/flush_cache")[0], 200)
        out = os.path.join(self.dir, "prof")
        for pid in ("../escape", "a/b", "/abs", ".hidden", "", "x" * 200, "nul\u0000x"):
            st, err = self.eng.post("/start_profile", {"output_dir": out, "profile_id": pid})
            self.assertEqual(st, 400, (pid, err))
            self.assertIn("profile_id", err["error"]["message"])
        self.assertFalse(os.path.exists(os.path.join(self.dir, "escape")))
        st, r = self.eng.post("/start_profile", {"output_dir": out, "profile_id": "run-1.a"})
        self.assertEqual(st, 200, r)
        self.eng.generate({"text": "Once", "sampling_params": {"max_new_tokens": 2}})
        st, r = self.eng.post("/stop_profile", {})
        self.assertEqual(st, 200, r)
        self.assertEqual(os.path.dirname(r["path"]), out)
        self.assertTrue(os.path.basename(r["path"]).startswith("run-1.a-"))
        # The saved token goes when the engine stops.
        path = self.token_file()
        self.assertEqual(self.eng.stop(), 0)
        self.assertFalse(os.path.exists(path))


class OtherUserAgainstRouter(RlhostTestCase):
    tmp_prefix = "rlhost-isolation-"

    def start_worker(self):
        p = subprocess.Popen([sys.executable, WORKER, "--port", "0", "--name", "w"], stdout=subprocess.PIPE, text=True)
        self.procs.append(p)
        line = p.stdout.readline()
        self.assertTrue(line.startswith("PORT "), line)
        return "http://127.0.0.1:%s" % line.split()[1]

    def start_router(self, *extra):
        ready = os.path.join(self.dir, "router-%d.url" % len(self.procs))
        p = subprocess.Popen([BIN, "router", "--port", "0", "--ready-file", ready, "--health-interval", "0.2", *extra],
                             env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.procs.append(p)
        wait_for(lambda: os.path.exists(ready) or p.poll() is not None, what="router ready file")
        self.assertIsNone(p.poll())
        with open(ready) as f:
            return f.read().strip()

    def request(self, method, url, body=None, admin=True):
        u = urllib.parse.urlsplit(url)
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        h = dict(self.admin) if admin else {}
        if body is not None:
            h["Content-Type"] = "application/json"
        c.request(method, u.path + ("?" + u.query if u.query else ""),
                  body=json.dumps(body) if body is not None else None, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, json.loads(data) if data else None

    def test_worker_changes_need_the_token_and_urls_are_checked(self):
        intruder_ids()
        w = self.start_worker()
        r = self.start_router()
        for method, path, body in [("POST", "/add_worker?url=" + w, None), ("POST", "/workers", {"url": w}),
                                   ("POST", "/add_worker?url=http://169.254.169.254", None),
                                   ("POST", "/flush_cache", None), ("DELETE", "/workers/1", None),
                                   ("POST", "/remove_worker?url=" + w, None)]:
            st, text = curl_as_intruder(method, r + path, body)
            self.assertEqual(st, 401, (path, text))
        self.assertEqual(self.request("GET", r + "/workers")[1]["workers"], [])
        self.assertEqual(curl_as_intruder("GET", r + "/workers")[0], 200)  # reading stays open
        # The owner: only http(s) URLs, no link-local hosts, no paths or credentials.
        for bad in ("file:///etc/passwd", "gopher://127.0.0.1:70", "http://169.254.169.254",
                    "http://[fe80::1]:80", "http://user:pw@127.0.0.1:1", "http://127.0.0.1:1/admin"):
            st, j = self.request("POST", r + "/workers", {"url": bad})
            self.assertEqual(st, 400, (bad, j))
            self.assertIn("bad worker URL", j["error"]["message"])
        st, j = self.request("POST", r + "/workers", {"url": w})
        self.assertEqual(st, 201, j)
        self.assertEqual((j["status"], j["is_healthy"]), ("pending", False))  # not shown healthy before a probe
        wait_for(lambda: self.request("GET", r + "/workers")[1]["workers"][0]["status"] == "healthy",
                 what="first probe")
        st, j = self.request("POST", r + "/add_worker?url=http://127.0.0.1:1", admin=False)
        self.assertEqual(st, 401)
        self.assertIn("Authorization: Bearer", j["error"]["message"])

    def test_link_local_workers_when_allowed(self):
        r = self.start_router("--allow-link-local-workers", "--health-timeout", "0.2")
        st, j = self.request("POST", r + "/workers", {"url": "http://169.254.7.7:9"})
        self.assertEqual(st, 201, j)
        wait_for(lambda: self.request("GET", r + "/workers")[1]["workers"][0]["status"] == "unhealthy",
                 what="the unreachable worker's first probe")


STATIC_SERVER = """
local srv = assert(rl.http.serve { static_dir = arg[1], port = 0 })
print(srv:url())
io.stdout:flush()
while true do rl.sleep(3600) end
"""


class StaticFilesUnderTheirFolderOnly(RlhostTestCase):
    def test_no_nul_truncation_no_symlink_out(self):
        site = os.path.join(self.dir, "site")
        os.makedirs(os.path.join(site, "sub"))
        self.write("site/x", "the file x")
        self.write("site/index.html", "<p>viewer</p>")
        self.write("secret/key.txt", "SECRET")
        os.symlink(os.path.join(self.dir, "secret", "key.txt"), os.path.join(site, "leak.txt"))
        os.symlink("../secret", os.path.join(site, "up"))
        os.symlink("/etc", os.path.join(site, "etc"))
        script = self.write("serve.lua", STATIC_SERVER)
        p = subprocess.Popen([BIN, "--no-control", script, site], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=self.env)
        self.procs.append(p)
        url = p.stdout.readline().strip()
        self.assertTrue(url.startswith("http://127.0.0.1:"), p.stderr.read() if p.poll() is not None else url)
        self.assertEqual(raw_get(url, "/"), (200, b"<p>viewer</p>"))
        self.assertEqual(raw_get(url, "/x"), (200, b"the file x"))
        st, body = raw_get(url, "/x%00.html")
        self.assertEqual(st, 400)
        self.assertNotIn(b"the file x", body)
        for path in ("/leak.txt", "/up/key.txt", "/etc/passwd", "/etc/hostname", "/sub"):
            st, body = raw_get(url, path)
            self.assertEqual(st, 404, (path, body))
            self.assertNotIn(b"SECRET", body)
        for path in ("/../secret/key.txt", "/%2e%2e/secret/key.txt", "/sub/%2E%2E/%2e%2e/secret/key.txt"):
            st, body = raw_get(url, path)
            self.assertIn(st, (400, 404), path)
            self.assertNotIn(b"SECRET", body)


LIFECYCLE = """
-- Starts what a recipe starts (process-mode engine and router, a side process),
-- writes their pids, then waits for a signal -- or fails (arg[3] == "error").
local eng = assert(rl.engine.start { model = arg[1], mode = "process", threads = 1, port = 0 })
local router = assert(rl.router.start { mode = "process", workers = { eng.url } })
local side = assert(rl.process.spawn { "sleep", "600" })
local f = assert(io.open(arg[2] .. ".tmp", "w"))
f:write(rl.json.encode { rl.process.pid(), eng.pid, router.pid, side.pid })
f:close()
os.rename(arg[2] .. ".tmp", arg[2])
if arg[3] == "error" then error("the recipe failed") end
rl.sleep(600)
"""


class NoProcessLeftBehind(RlhostTestCase):
    tmp_prefix = "rlhost-lifecycle-"

    def start(self, mode="wait"):
        if not os.path.isdir(STORIES):  # missing data fails, never skips (docs/conventions.md)
            self.fail("test model missing: %s (configuring the build unpacks tests/data there)" % STORIES)
        script = self.write("lifecycle.lua", LIFECYCLE)
        pids = os.path.join(self.dir, "pids.json")
        log = open(os.path.join(self.dir, "run.log"), "w")
        self.addCleanup(log.close)
        p = subprocess.Popen([BIN, "--no-control", script, STORIES, pids, mode], stdout=log, stderr=subprocess.STDOUT,
                             env=self.env, cwd=self.dir)
        self.procs.append(p)
        wait_for(lambda: os.path.exists(pids) or p.poll() is not None, timeout=120, what="children started")
        with open(pids) as f:
            me, *children = json.load(f)
        self.assertEqual(me, p.pid)
        for c in children:
            if mode == "error":
                continue  # the recipe fails at once: its children may be stopped already
            self.assertFalse(gone(c), c)
            self.assertEqual(os.getpgid(c), c)  # its own group: a terminal's ^C reaches the parent first
        self.addCleanup(self.kill_leftovers, children)
        return p, children

    def kill_leftovers(self, pids):
        for c in pids:
            if not gone(c):
                os.kill(c, signal.SIGKILL)

    def log_text(self):
        with open(os.path.join(self.dir, "run.log")) as f:
            return f.read()

    def assert_all_gone(self, children):
        wait_for(lambda: all(gone(c) for c in children), timeout=20, what="children to die")

    def test_sigkill_to_the_parent(self):
        p, children = self.start()
        p.kill()
        p.wait(timeout=10)
        self.assert_all_gone(children)  # PR_SET_PDEATHSIG

    def test_sigterm_exits_143_and_stops_the_children(self):
        p, children = self.start()
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(timeout=30), 143, self.log_text())
        self.assert_all_gone(children)

    def test_error_exit_stops_the_children(self):
        p, children = self.start("error")
        self.assertEqual(p.wait(timeout=60), 1, self.log_text())
        self.assertIn("the recipe failed", self.log_text())
        self.assertIn("child processes left running", self.log_text())
        self.assert_all_gone(children)


if __name__ == "__main__":
    support.main()
