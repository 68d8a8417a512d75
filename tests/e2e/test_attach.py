#!/usr/bin/env python3
"""End-to-end tests of the control socket and `rlhost attach`.

The demo: recipes/counter.lua runs as a subprocess with --control PATH; the
test attaches, reads `counter`, sets `step = 1000`, watches the counter jump,
sets `stop = true` and checks that the recipe ends with status 0 and prints
its final state. Also: errors in attached chunks, bad targets, socket modes,
`attach --list`, stale sockets, disconnects mid-chunk, the raw protocol and
TCP with a token.

    RLHOST_BIN=build/rlhost RLHOST_SOURCE_DIR=. python3 tests/e2e/test_attach.py

Python standard library only; every wait is bounded and every process is
killed in a finally block.
"""
import json
import os
import socket
import stat
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import BIN, TIMEOUT, RlhostTestCase, wait_for  # noqa: E402
import support  # noqa: E402


def dead_pid():
    pid = 4_000_000
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
        pid += 1


class AttachTest(RlhostTestCase):
    tmp_prefix = "rlhost-attach-"

    # ---- helpers ------------------------------------------------------------------
    def attach(self, *args, timeout=TIMEOUT, env=None):
        return subprocess.run([BIN, "attach", *args], capture_output=True, text=True,
                              env=env or self.env, timeout=timeout, errors="replace")

    def read_counter(self, sock):
        r = self.attach(sock, "-e", "return counter")
        self.assertEqual(r.returncode, 0, r.stderr)
        return int(r.stdout.strip())

    # ---- the demo ---------------------------------------------------------------------
    def test_demo_read_change_and_stop_a_running_recipe(self):
        proc, sock = self.start_counter()
        self.wait_socket(proc, sock)
        first = wait_for(lambda: self.read_counter(sock), what="counter > 0")
        self.assertGreater(first, 0)

        r = self.attach(sock, "-e", "step = 1000")
        self.assertEqual((r.returncode, r.stdout, r.stderr), (0, "", ""))
        jumped = wait_for(lambda: (lambda c: c if c >= first + 1000 else None)(self.read_counter(sock)),
                          what="the counter to jump by 1000")
        self.assertGreaterEqual(jumped, first + 1000)

        r = self.attach(sock, "-e", "stop = true")
        self.assertEqual(r.returncode, 0, r.stderr)
        out, err = proc.communicate(timeout=TIMEOUT)
        self.assertEqual(proc.returncode, 0, err)
        self.assertRegex(out, r"counter: stopped at \d+ \(step 1000\)")
        final = int(out.split("stopped at ")[1].split()[0])
        self.assertGreaterEqual(final, jumped)
        self.assertFalse(os.path.exists(sock), "the socket is removed at exit")

    def test_error_in_attached_chunk_is_returned_and_host_keeps_running(self):
        proc, sock = self.start_counter()
        self.wait_socket(proc, sock)
        r = self.attach(sock, "-e", "local function f() error('nope') end f()")
        self.assertEqual(r.returncode, 1)
        self.assertIn("attach:1: nope", r.stderr)
        self.assertIn("in function 'f'", r.stderr)
        r = self.attach(sock, "-e", "for i = 1, 2 do")
        self.assertEqual(r.returncode, 1)
        self.assertIn("<eof>", r.stderr)
        # -e chunks run in order; one failing does not stop the others
        r = self.attach(sock, "-e", "error({code = 7})", "-e", "print('still', 'here') return 1, 'two', {3}")
        self.assertEqual(r.returncode, 1)
        self.assertIn("{code = 7}", r.stderr)
        self.assertEqual(r.stdout, 'still\there\n1\t"two"\t{3}\n')
        self.assertIsNone(proc.poll(), "the host survived")
        self.assertGreater(self.read_counter(sock), 0)

    def test_chunks_run_as_tasks_and_may_wait(self):
        proc, sock = self.start_counter()
        self.wait_socket(proc, sock)
        r = self.attach(sock, "-e", "local a = counter; rl.sleep(0.2); return counter > a")
        self.assertEqual((r.returncode, r.stdout), (0, "true\n"), r.stderr)

    def test_client_disconnecting_mid_chunk_does_not_hurt_the_host(self):
        proc, sock = self.start_counter()
        self.wait_socket(proc, sock)
        c = subprocess.Popen([BIN, "attach", sock, "-e", "rl.sleep(30)"], env=self.env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.procs.append(c)
        time.sleep(0.3)
        c.kill()
        c.wait(timeout=10)
        # raw protocol: a request sent, then the connection dropped before the reply
        s = socket.socket(socket.AF_UNIX)
        s.connect(sock)
        s.sendall(b'{"id": 1, "op": "eval", "code": "rl.sleep(1)"}\n')
        s.close()
        time.sleep(0.2)
        self.assertIsNone(proc.poll())
        self.assertGreater(self.read_counter(sock), 0)

    def test_raw_protocol(self):
        proc, sock = self.start_counter()
        self.wait_socket(proc, sock)
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(TIMEOUT)
            s.connect(sock)
            f = s.makefile("rwb")
            # one request in two writes, then two requests in one write
            s.sendall(b'{"id": 1, "op": "ev')
            time.sleep(0.05)
            s.sendall(b'al", "code": "print(\'p\') return counter > 0, rl.json.null"}\n')
            r = json.loads(f.readline())
            self.assertEqual(r, {"id": 1, "ok": True, "values": ["true", "json.null"], "output": "p\n",
                                 "error": "", "incomplete": False})
            s.sendall(b'{"id": "a", "op": "complete?", "code": "function f()"}\n'
                      b'{"id": "b", "op": "info"}\n')
            r = json.loads(f.readline())
            self.assertEqual((r["id"], r["incomplete"]), ("a", True))
            r = json.loads(f.readline())
            self.assertEqual(r["id"], "b")
            self.assertEqual(r["info"]["pid"], proc.pid)
            self.assertTrue(r["info"]["script"].endswith("counter.lua"))
            s.sendall(b"not json\n")
            r = json.loads(f.readline())
            self.assertFalse(r["ok"])
            self.assertIn("malformed", r["error"])
            # an eval that is merely unfinished says so
            s.sendall(b'{"id": 2, "op": "eval", "code": "if true then"}\n')
            r = json.loads(f.readline())
            self.assertEqual((r["ok"], r["incomplete"]), (False, True))
            # interrupt cancels this connection's running chunks
            s.sendall(b'{"id": 3, "op": "eval", "code": "rl.sleep(30)"}\n')
            time.sleep(0.1)
            s.sendall(b'{"id": 4, "op": "interrupt"}\n')
            replies = {}
            for _ in range(2):
                r = json.loads(f.readline())
                replies[r["id"]] = r
            self.assertEqual(replies[4]["values"], ["1"])
            self.assertEqual((replies[3]["ok"], replies[3]["error"]), (False, "interrupted"))

    # ---- finding processes ----------------------------------------------------------------
    def test_socket_and_directory_modes(self):
        proc, sock = self.start_counter([])  # default location
        run_dir = os.path.join(self.dir, "xdg", "rlhost")
        default_sock = os.path.join(run_dir, "%d.sock" % proc.pid)
        self.wait_socket(proc, default_sock)
        self.assertEqual(stat.S_IMODE(os.stat(default_sock).st_mode), 0o600)
        self.assertTrue(stat.S_ISSOCK(os.stat(default_sock).st_mode))
        self.assertEqual(stat.S_IMODE(os.stat(run_dir).st_mode), 0o700)
        # the record is written (atomically) just after the socket is listening: wait for it
        # too (a repeat run once read it in between)
        record_path = os.path.join(run_dir, "%d.json" % proc.pid)
        wait_for(lambda: os.path.exists(record_path), what="the record " + record_path)
        with open(record_path) as f:
            record = json.load(f)
        self.assertEqual(record["pid"], proc.pid)
        self.assertEqual(record["socket"], default_sock)
        self.assertEqual(record["cwd"], os.path.realpath(self.dir))
        self.assertIn("started_at", record)
        # attach by pid, and with no target at all (the only live process)
        r = self.attach(str(proc.pid), "-e", "return type(counter)")
        self.assertEqual((r.returncode, r.stdout), (0, '"number"\n'), r.stderr)
        r = self.attach("-e", "return stop")
        self.assertEqual((r.returncode, r.stdout), (0, "false\n"), r.stderr)
        self.attach("-e", "stop = true")
        proc.communicate(timeout=TIMEOUT)
        self.assertEqual(proc.returncode, 0)
        self.assertFalse(os.path.exists(default_sock))
        self.assertFalse(os.path.exists(os.path.join(run_dir, "%d.json" % proc.pid)))

    def test_list_shows_live_processes_and_cleans_stale_ones(self):
        proc, sock = self.start_counter()
        self.wait_socket(proc, sock)
        run_dir = os.path.join(self.dir, "xdg", "rlhost")
        wait_for(lambda: os.path.exists(os.path.join(run_dir, "%d.json" % proc.pid)), what="the record")
        # a record and a socket left by a process that died
        gone = dead_pid()
        stale_sock = os.path.join(run_dir, "%d.sock" % gone)
        s = socket.socket(socket.AF_UNIX)
        s.bind(stale_sock)
        s.close()
        with open(os.path.join(run_dir, "%d.json" % gone), "w") as f:
            json.dump({"pid": gone, "script": "dead.lua", "socket": stale_sock}, f)
        r = self.attach("--list")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"(?m)^PID\s+STARTED\s+SCRIPT\s+SOCKET")
        self.assertRegex(r.stdout, r"(?m)^%d\s+\S+\s+\S*counter\.lua\s+%s$" % (proc.pid, sock))
        self.assertNotIn("dead.lua", r.stdout)
        self.assertFalse(os.path.exists(stale_sock), "stale socket removed")
        self.assertFalse(os.path.exists(os.path.join(run_dir, "%d.json" % gone)), "stale record removed")

    def test_no_target_with_several_processes_lists_them(self):
        p1, s1 = self.start_counter()
        self.wait_socket(p1, s1)
        p2, _ = self.start_counter([])
        self.wait_socket(p2, os.path.join(self.dir, "xdg", "rlhost", "%d.sock" % p2.pid))
        for p in (p1, p2):  # both records (written just after each socket listens)
            wait_for(lambda: os.path.exists(os.path.join(self.dir, "xdg", "rlhost", "%d.json" % p.pid)),
                     what="the record of %d" % p.pid)
        r = self.attach("-e", "return 1")
        self.assertEqual(r.returncode, 2)
        self.assertIn("several rlhost processes", r.stderr)
        self.assertIn(str(p1.pid), r.stderr)
        self.assertIn(str(p2.pid), r.stderr)

    def test_bad_targets_fail_clearly(self):
        gone = dead_pid()
        r = self.attach(str(gone), "-e", "return 1")
        self.assertEqual(r.returncode, 2)
        self.assertIn("rlhost attach: no rlhost process with pid %d (no socket at " % gone, r.stderr)
        r = self.attach(os.path.join(self.dir, "missing.sock"), "-e", "return 1")
        self.assertEqual(r.returncode, 2)
        self.assertIn("no socket at", r.stderr)
        refused = os.path.join(self.dir, "refused.sock")
        s = socket.socket(socket.AF_UNIX)
        s.bind(refused)
        s.close()
        r = self.attach(refused, "-e", "return 1")
        self.assertEqual(r.returncode, 2)
        self.assertIn("connection refused", r.stderr)
        r = self.attach("-e", "return 1")
        self.assertEqual(r.returncode, 2)
        self.assertIn("no live rlhost process", r.stderr)
        r = self.attach("tcp://10.1.2.3:99", "-e", "1")
        self.assertEqual(r.returncode, 2)
        self.assertIn("only listens on 127.0.0.1", r.stderr)

    def test_a_peer_that_never_answers_and_a_huge_pid(self):
        # A socket that accepts and then says nothing (not rlhost, or a stopped process):
        # attach gives up with a message instead of waiting for good.
        silent = os.path.join(self.dir, "silent.sock")
        s = socket.socket(socket.AF_UNIX)
        s.bind(silent)
        s.listen(4)
        held = []
        try:
            r = self.attach(silent, "-e", "return 1", timeout=60)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("no answer within 10 s", r.stderr)
            self.assertIn(silent, r.stderr)
            r = self.attach(silent, timeout=60)   # interactive: the same first exchange
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("no answer within 10 s", r.stderr)
        finally:
            s.close()
        for pid in ("99999999999999999999", "4294967296", "2147483648"):   # aborted (std::out_of_range)
            r = self.attach(pid, "-e", "return 1")
            self.assertEqual(r.returncode, 2, (pid, r.returncode, r.stderr))
            self.assertIn("no rlhost process with pid", r.stderr)

    def test_control_socket_in_use_and_no_control(self):
        proc, sock = self.start_counter()
        self.wait_socket(proc, sock)
        r = subprocess.run([BIN, "--control", sock, "-e", "print(1)"], capture_output=True, text=True,
                           env=self.env, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 2)
        self.assertIn("in use by another process", r.stderr)
        r = subprocess.run([BIN, "--no-control", "-e", "print(require('rl._core').control.info())"], capture_output=True,
                           text=True, env=self.env, timeout=TIMEOUT)
        self.assertEqual((r.returncode, r.stdout), (0, "nil\n"), r.stderr)

    # ---- TCP ---------------------------------------------------------------------------------
    def tcp_port(self, proc):
        """The control TCP port of `proc` (started with --control-tcp 0), from its record."""
        record = os.path.join(self.dir, "xdg", "rlhost", "%d.json" % proc.pid)
        wait_for(lambda: os.path.exists(record), what="the record " + record)
        with open(record) as f:
            port = json.load(f)["tcp_port"]
        self.assertGreater(port, 0)
        return port

    def test_tcp_needs_the_token(self):
        # port 0: the host takes a free one (no port picked here and released for it)
        proc, _ = self.start_counter(["--control-tcp", "0"])
        run_dir = os.path.join(self.dir, "xdg", "rlhost")
        token_file = os.path.join(run_dir, "%d.token" % proc.pid)
        self.wait_socket(proc, token_file)
        port = self.tcp_port(proc)
        self.assertEqual(stat.S_IMODE(os.stat(token_file).st_mode), 0o600)
        with open(token_file) as f:
            token = f.read().strip()
        self.assertRegex(token, r"^[0-9a-f]{32}$")
        target = "tcp://127.0.0.1:%d" % port
        r = self.attach(target, "--token", token, "-e", "return counter > 0")
        self.assertEqual((r.returncode, r.stdout), (0, "true\n"), r.stderr)
        r = self.attach(target, "--token", "0" * 32, "-e", "return 1")
        self.assertEqual(r.returncode, 2)
        self.assertIn("bad token", r.stderr)
        r = self.attach(target, "-e", "return 2")  # the token file is found through the record
        self.assertEqual((r.returncode, r.stdout), (0, "2\n"), r.stderr)
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
            s.sendall(b'{"id": 1, "op": "eval", "code": "stop = true"}\n')
            r = json.loads(s.makefile("rb").readline())
            self.assertFalse(r["ok"])
            self.assertIn("token required", r["error"])
        self.attach(target, "--token", token, "-e", "stop = true")
        out, err = proc.communicate(timeout=TIMEOUT)
        self.assertEqual(proc.returncode, 0)
        self.assertEqual(err.count(token), 1, "the generated token is printed once: " + err)
        self.assertFalse(os.path.exists(token_file))

    def test_tcp_token_from_environment(self):
        env = dict(self.env, RLHOST_CONTROL_TOKEN="s3cret-token")
        proc, _ = self.start_counter(["--control-tcp", "0"], env=env)
        self.wait_socket(proc, os.path.join(self.dir, "xdg", "rlhost", "%d.token" % proc.pid))
        port = self.tcp_port(proc)
        r = self.attach("tcp://127.0.0.1:%d" % port, "-e", "return 'ok'", env=env)
        self.assertEqual((r.returncode, r.stdout), (0, '"ok"\n'), r.stderr)
        self.attach("tcp://127.0.0.1:%d" % port, "-e", "stop = true", env=env)
        out, err = proc.communicate(timeout=TIMEOUT)
        self.assertNotIn("s3cret-token", err, "a token from the environment is not printed")


if __name__ == "__main__":
    support.main()
