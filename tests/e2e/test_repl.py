#!/usr/bin/env python3
"""End-to-end tests of the REPL: `rlhost`, `rlhost -i FILE.lua` and interactive
`rlhost attach`, driven through a pseudo-terminal (readline, Ctrl-C, Ctrl-D)
and through a pipe (the scripted, prompt-free mode).

    RLHOST_BIN=build/rlhost RLHOST_SOURCE_DIR=. python3 tests/e2e/test_repl.py

Python standard library only; every read has a deadline and every process is
killed in a finally block / tearDown.
"""
import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import textwrap
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import BIN, TIMEOUT, RlhostTestCase  # noqa: E402
import support  # noqa: E402

ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b[=>]")  # readline's terminal control sequences


class Pty:
    """A child process on a pseudo-terminal (its controlling tty, so ^C is SIGINT)."""

    def __init__(self, args, env):
        pid, fd = pty.fork()
        if pid == 0:  # child
            try:
                os.execve(BIN, [BIN, *args], env)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        self.raw = b""
        self.pos = 0
        self.status = None
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))

    def send(self, text):
        os.write(self.fd, text.encode() if isinstance(text, str) else text)

    def line(self, text):
        self.send(text + "\r")

    def text(self):
        """Everything printed so far, without escape codes and carriage returns."""
        return ANSI.sub(b"", self.raw).replace(b"\r", b"").decode(errors="replace")

    def expect(self, pattern, timeout=10):
        """Reads until `pattern` (a regex over text()) matches after what earlier
        calls consumed; returns the text up to the end of the match."""
        rx = re.compile(pattern, re.S)
        end = time.time() + timeout
        while True:
            text = self.text()
            m = rx.search(text, self.pos)
            if m:
                out = text[self.pos:m.end()]
                self.pos = m.end()
                return out
            left = end - time.time()
            if left <= 0:
                raise AssertionError("timed out waiting for %r; output after the last match:\n%s"
                                     % (pattern, text[self.pos:]))
            r, _, _ = select.select([self.fd], [], [], left)
            if r:
                try:
                    data = os.read(self.fd, 65536)
                except OSError:
                    data = b""
                if not data:
                    raise AssertionError("process ended while waiting for %r; output:\n%s"
                                         % (pattern, text[self.pos:]))
                self.raw += data

    def wait(self, timeout=10):
        end = time.time() + timeout
        while time.time() < end:
            # keep draining so the child never blocks on a full pty
            r, _, _ = select.select([self.fd], [], [], 0.05)
            if r:
                try:
                    self.raw += os.read(self.fd, 65536)
                except OSError:
                    pass
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
                return self.status
        raise AssertionError("process %d did not exit within %.0f s" % (self.pid, timeout))

    def kill(self):
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self.status = -9
        try:
            os.close(self.fd)
        except OSError:
            pass


class ReplTest(RlhostTestCase):
    tmp_prefix = "rlhost-repl-"

    def setUp(self):
        super().setUp()
        self.history = os.path.join(self.dir, "history")
        self.env.update(TERM="xterm", RLHOST_HISTORY=self.history)
        self.ptys = []

    def tearDown(self):
        for p in self.ptys:
            p.kill()
        super().tearDown()

    def pty(self, *args):
        p = Pty(list(args), self.env)
        self.ptys.append(p)
        return p

    # ---- a terminal ----------------------------------------------------------------
    def test_values_multiline_tables_and_errors(self):
        r = self.pty("--no-control")
        r.expect(r"Ctrl-D exits\.\n> ")
        r.line("1 + 1, 'two'")
        r.expect(r'\n2\t"two"\n> ')
        r.line("function add(a, b)")
        r.expect(r"\n>> ")
        r.line("  return a + b")
        r.expect(r"\n>> ")
        r.line("end")
        r.expect(r"\n> ")
        r.line("add(40, 2)")
        r.expect(r"\n42\n> ")
        r.line("{b = {1, 2, 3}, a = 'x', deep = {l1 = {l2 = {l3 = {}}}}}")
        r.expect(r'\n\{a = "x", b = \{1, 2, 3\}, deep = \{l1 = \{l2 = \{\.\.\.\}\}\}\}\n> ')
        r.line("error('boom')")
        r.expect(r"stdin:1: boom\nstack traceback:\n.*in main chunk\n> ")
        r.line("x = = 1")
        r.expect(r"unexpected symbol near '='\n> ")
        r.line("add(1, 1)")  # still alive, state kept
        r.expect(r"\n2\n> ")
        r.send("\x04")  # Ctrl-D
        self.assertEqual(r.wait(), 0)
        with open(self.history) as f:
            hist = f.read()
        self.assertIn("function add(a, b)\n", hist)
        self.assertIn("add(40, 2)\n", hist)

    def test_ctrl_c_interrupts_a_running_chunk_and_clears_a_line(self):
        r = self.pty("--no-control")
        r.expect(r"> ")
        r.line("n = 0; while true do n = n + 1; rl.sleep(0.01) end")
        time.sleep(0.3)
        r.send("\x03")
        r.expect(r"interrupted\n> ")
        r.line("n > 5")
        r.expect(r"\ntrue\n> ")
        # ^C while typing drops the line, also inside a multi-line chunk
        r.send("this is not lua")
        time.sleep(0.1)
        r.send("\x03")
        r.expect(r"\^C\n> ")
        r.line("for i = 1, 2 do")
        r.expect(r">> ")
        r.send("\x03")
        r.expect(r"\^C\n> ")
        # several ^C at an idle prompt never end the process
        for _ in range(4):
            r.send("\x03")
            r.expect(r"\^C\n> ")
            time.sleep(0.05)
        r.line("'alive'")
        r.expect(r'"alive"\n> ')
        r.send("\x04")
        self.assertEqual(r.wait(), 0)

    def test_i_runs_the_recipe_then_the_repl_while_its_tasks_run(self):
        recipe = self.write("ticker.lua", """
            ticks = 0
            rl.spawn(function()
              while true do ticks = ticks + 1; rl.sleep(0.01) end
            end)
            print("recipe done")
        """)
        r = self.pty("--no-control", "-i", recipe)
        r.expect(r"recipe done\n.*?> ")
        r.line("ticks")
        first = int(re.search(r"\n(\d+)\n", r.expect(r"\n\d+\n> ")).group(1))
        # idle at the prompt: the task keeps ticking (asked again until it has; the
        # deadline only guards against a hang, it is not a speed check)
        deadline = time.time() + 60
        while True:
            time.sleep(0.2)
            r.line("ticks")
            second = int(re.search(r"\n(\d+)\n", r.expect(r"\n\d+\n> ")).group(1))
            if second > first + 10 or time.time() > deadline:
                break
        self.assertGreater(second, first + 10)
        r.send("\x04")
        self.assertEqual(r.wait(), 0)

    def test_i_after_a_failing_recipe_opens_the_repl_and_exits_1(self):
        recipe = self.write("broken.lua", """
            before = "set"
            error("recipe broke")
        """)
        r = self.pty("--no-control", "-i", recipe)
        r.expect(r"recipe broke.*?> ")
        r.line("before")
        r.expect(r'"set"\n> ')
        r.send("\x04")
        self.assertEqual(r.wait(), 1)

    def test_rl_exit_at_the_prompt_ends_the_process_with_its_code(self):
        r = self.pty("--no-control")
        r.expect(r"> ")
        r.line("rl.exit(7)")
        self.assertEqual(r.wait(), 7)

    # ---- interactive attach -----------------------------------------------------------------
    def test_interactive_attach(self):
        host, sock = self.start_counter()
        self.wait_socket(host, sock)  # fails if the recipe exits early
        r = self.pty("attach", sock)
        r.expect(r"attached to rlhost pid %d.*?rlhost:%d> " % (host.pid, host.pid))
        r.line("counter > 0")
        r.expect(r"\ntrue\n.*?> ")
        r.line("print('from inside', step)")
        r.expect(r"from inside\t1\n.*?> ")
        r.line("if step then")
        r.expect(r">> ")
        r.line("  step = 5 end")
        r.expect(r"\nrlhost:\d+> ")
        r.line("rl.sleep(30)")
        time.sleep(0.3)
        r.send("\x03")
        r.expect(r"interrupted\n.*?> ")
        r.line("error('attached error')")
        r.expect(r"attach:1: attached error.*?> ")
        r.line("step")
        r.expect(r"\n5\n.*?> ")
        r.send("\x04")  # detach: the process keeps running
        self.assertEqual(r.wait(), 0)
        self.assertIsNone(host.poll())
        # the process ending while attached ends the session
        r2 = self.pty("attach", sock)
        r2.expect(r"> ")
        stop = subprocess.run([BIN, "attach", sock, "-e", "stop = true"], env=self.env, timeout=TIMEOUT,
                              capture_output=True, text=True)
        self.assertEqual(stop.returncode, 0, stop.stderr)
        host.communicate(timeout=TIMEOUT)
        self.assertEqual(host.returncode, 0)
        r2.expect(r"closed the connection")
        self.assertEqual(r2.wait(), 2)

    # ---- a pipe: scripted, no prompts ---------------------------------------------------
    def test_scripted_repl_from_a_pipe(self):
        script = textwrap.dedent("""\
            x = 20
            function twice(v)
              return v * 2
            end
            twice(x) + 2
            {list = {1, 2}}
            error("scripted error")
            print("after the error")
            t = rl.spawn(function() rl.sleep(0.05); done_flag = true end)
            t:wait(); return done_flag
        """)
        r = subprocess.run([BIN, "--no-control"], input=script, capture_output=True, text=True,
                           env=self.env, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "42\n{list = {1, 2}}\nafter the error\ntrue\n")
        self.assertIn("stdin:1: scripted error", r.stderr)
        self.assertNotIn("> ", r.stdout)

    def test_scripted_repl_edge_cases(self):
        # no newline at the end; an unfinished chunk at EOF is reported
        r = subprocess.run([BIN, "--no-control"], input="return 1\nfor i = 1, 2 do", capture_output=True,
                           text=True, env=self.env, timeout=TIMEOUT)
        self.assertEqual(r.stdout, "1\n")
        self.assertIn("<eof>", r.stderr)
        r = subprocess.run([BIN, "--no-control"], input="print('a')\nrl.exit(3)\nprint('not reached')\n",
                           capture_output=True, text=True, env=self.env, timeout=TIMEOUT)
        self.assertEqual((r.returncode, r.stdout), (3, "a\n"))
        # stdin from a regular file (epoll cannot watch those) and from /dev/null
        path = self.write("in.lua", "return 'from a file'\n")
        with open(path) as f:
            r = subprocess.run([BIN, "--no-control"], stdin=f, capture_output=True, text=True, env=self.env,
                               timeout=TIMEOUT)
        self.assertEqual((r.returncode, r.stdout), (0, '"from a file"\n'), r.stderr)
        r = subprocess.run([BIN, "--no-control", "-i", "-e", "print('e ran')"], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, env=self.env, timeout=TIMEOUT)
        self.assertEqual((r.returncode, r.stdout), (0, "e ran\n"), r.stderr)
        # a recipe that calls rl.exit ends the process: no REPL even with -i
        r = subprocess.run([BIN, "--no-control", "-i", "-e", "rl.exit(4)"], input="print('repl ran')\n",
                           capture_output=True, text=True, env=self.env, timeout=TIMEOUT)
        self.assertEqual((r.returncode, r.stdout), (4, ""), r.stderr)


if __name__ == "__main__":
    support.main()
