#!/usr/bin/env python3
"""End-to-end tests of the rlhost command line: host options, exit codes, error
reports, recipe options (rl.args), logging, the module path and `cmake --install`.

    RLHOST_BIN=build/rlhost RLHOST_SOURCE_DIR=. python3 tests/e2e/test_cli.py

Python standard library only; every process runs with a timeout.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import BIN, SOURCE_DIR, RlhostTestCase, clean_env  # noqa: E402
import support  # noqa: E402

TIMEOUT = 60


def rlhost(*args, env=None, cwd=None, binary=None, timeout=TIMEOUT):
    return subprocess.run(
        [binary or BIN, *args],
        capture_output=True,
        text=True,
        errors="replace",
        env=env if env is not None else clean_env(),
        cwd=cwd,
        timeout=timeout,
    )


class CliTest(RlhostTestCase):
    tmp_prefix = "rlhost-cli-"

    def assertExit(self, proc, code):
        self.assertEqual(
            proc.returncode, code,
            "exit status %d, expected %d\n--- stdout\n%s\n--- stderr\n%s"
            % (proc.returncode, code, proc.stdout, proc.stderr))


class HostOptions(CliTest):
    def test_version(self):
        p = rlhost("--version")
        self.assertExit(p, 0)
        self.assertRegex(p.stdout, r"^rlhost \d+\.\d+\.\d+")

    def test_help(self):
        p = rlhost("--help")
        self.assertExit(p, 0)
        self.assertIn("usage: rlhost", p.stdout)
        self.assertIn("--log-level", p.stdout)
        self.assertIn("exit status", p.stdout)
        self.assertExit(rlhost("-h"), 0)

    def test_unknown_host_option(self):
        p = rlhost("--bogus-option", "x.lua")
        self.assertExit(p, 2)
        self.assertIn("--bogus-option", p.stderr)
        self.assertIn("rlhost --help", p.stderr)

    def test_e_needs_code(self):
        p = rlhost("-e")
        self.assertExit(p, 2)
        self.assertIn("-e", p.stderr)

    def test_e_chunks_run_in_order_before_the_recipe(self):
        recipe = self.write("r.lua", 'io.write("c:", table.concat(rl.argv, ","))\n')
        p = rlhost("-e", 'io.write("a")', "-e", 'io.write("b")', recipe, "x", "y")
        self.assertExit(p, 0)
        self.assertEqual(p.stdout, "abc:x,y")

    def test_e_chunks_share_globals(self):
        p = rlhost("-e", "x = 40", "-e", "print(x + 2)")
        self.assertExit(p, 0)
        self.assertEqual(p.stdout, "42\n")


class Recipes(CliTest):
    def test_missing_recipe_file(self):
        missing = os.path.join(self.dir, "no_such_recipe.lua")
        p = rlhost(missing)
        self.assertExit(p, 2)
        self.assertIn("no_such_recipe.lua", p.stderr)

    def test_syntax_error_names_file_and_line(self):
        recipe = self.write("bad_syntax.lua", "local a = 1\nlocal b = 2\nlocal = 3\n")
        p = rlhost(recipe)
        self.assertExit(p, 1)
        self.assertIn("bad_syntax.lua:3:", p.stderr)

    def test_syntax_error_in_e_chunk(self):
        p = rlhost("-e", "x = = 1")
        self.assertExit(p, 1)
        self.assertIn("(command line):1:", p.stderr)

    def test_syntax_error_stops_before_anything_runs(self):
        recipe = self.write("late_syntax.lua", "print('ran')\nlocal = 1\n")
        p = rlhost("-e", "print('e ran')", recipe)
        self.assertExit(p, 1)
        self.assertNotIn("ran", p.stdout)

    def test_runtime_error_has_message_and_traceback(self):
        recipe = self.write("boom.lua", """\
            local function explode()
              error("boom at depth")
            end
            explode()
            """)
        p = rlhost(recipe)
        self.assertExit(p, 1)
        self.assertIn("boom at depth", p.stderr)
        self.assertIn("stack traceback", p.stderr)
        self.assertIn("boom.lua:2:", p.stderr)
        self.assertIn("boom.lua:4:", p.stderr)

    def test_error_inside_a_task_fails_the_run_when_waited(self):
        recipe = self.write("task_err.lua", """\
            local t = rl.spawn(function() rl.sleep(0.01); error("worker failed") end)
            t:wait()
            """)
        p = rlhost(recipe)
        self.assertExit(p, 1)
        self.assertIn("worker failed", p.stderr)
        self.assertIn("task_err.lua:1:", p.stderr)

    def test_rl_exit_code(self):
        self.assertExit(rlhost("-e", "rl.exit(7)"), 7)
        self.assertExit(rlhost("-e", "rl.exit()"), 0)
        recipe = self.write("exit.lua", 'print("before")\nrl.exit(3)\nprint("after")\n')
        p = rlhost(recipe)
        self.assertExit(p, 3)
        self.assertEqual(p.stdout, "before\n")
        p = rlhost("-e", "rl.exit(256)")
        self.assertExit(p, 1)
        self.assertIn("integer 0-255", p.stderr)

    def test_rl_exit_from_a_task(self):
        recipe = self.write("exit_task.lua", """\
            local t = rl.spawn(function() rl.sleep(0.01); rl.exit(5) end)
            t:wait()
            """)
        self.assertExit(rlhost(recipe), 5)
        # nobody waits for the task: rl.exit still ends the process
        p = rlhost("-e", 'rl.after(0.01, rl.exit, 6); rl.sleep(30); print("not reached")')
        self.assertExit(p, 6)
        self.assertNotIn("not reached", p.stdout)
        self.assertNotIn("never waited", p.stderr)

    def test_argv_script_and_arg(self):
        recipe = self.write("argv.lua", """\
            print(#rl.argv, rl.argv[1], rl.argv[2])
            print(arg[0] == rl.script, arg[1], select("#", ...), ...)
            """)
        p = rlhost(recipe, "--flag", "two words")
        self.assertExit(p, 0)
        self.assertEqual(p.stdout, "2\t--flag\ttwo words\ntrue\t--flag\t2\t--flag\ttwo words\n")

    def test_require_a_module_next_to_the_recipe(self):
        sub = os.path.join(self.dir, "proj")
        self.write("proj/helpers.lua", "return { twice = function(x) return 2 * x end }\n")
        self.write("proj/pkg/init.lua", "return { name = 'pkg' }\n")
        recipe = self.write("proj/main.lua", """\
            local h = require "helpers"
            local pkg = require "pkg"
            print(h.twice(21), pkg.name)
            """)
        elsewhere = os.path.join(self.dir, "elsewhere")
        os.makedirs(elsewhere)
        p = rlhost(recipe, cwd=elsewhere)
        self.assertExit(p, 0)
        self.assertEqual(p.stdout, "42\tpkg\n")
        # and with a relative recipe path
        p = rlhost(os.path.join("proj", "main.lua"), cwd=self.dir)
        self.assertExit(p, 0)
        self.assertEqual(p.stdout, "42\tpkg\n")
        self.assertTrue(os.path.isdir(sub))

    def test_hello_recipe(self):
        hello = os.path.join(SOURCE_DIR, "recipes", "hello.lua")
        p = rlhost(hello, "--workers", "3", "--max-delay", "0.01", "--seed", "1")
        self.assertExit(p, 0)
        for i in (1, 2, 3):
            self.assertIn("hello from worker %d" % i, p.stdout)
        p = rlhost(hello, "--workers", "2", "--json", "--max-delay", "0")
        self.assertExit(p, 0)
        self.assertIn('"says":"hello from worker 2"', p.stdout)
        self.assertExit(rlhost(hello, "--workers", "0"), 2)


ARGS_RECIPE = """\
    local opt = rl.args{
      description = "GRPO on GSM8K",
      {name = "rollout_batch_size", type = "int", default = 32, help = "prompts per rollout step"},
      {name = "lr", type = "number", default = 1e-6, help = "learning rate"},
      {name = "use_kl_loss", type = "bool", default = false},
      {name = "eval_datasets", type = "list", of = "string", default = {}},
      {name = "advantage_estimator", type = "string", choices = {"grpo", "reinforce_plus_plus"}, default = "grpo"},
      {name = "model_path", type = "string", required = true},
      {name = "dump", positional = true, type = "string", help = "dump to read"},
    }
    print(rl.json.encode(opt, {sort_keys = true}))
    rl.log.debug("debug record")
    rl.log.info("info record")
    """


class RecipeOptions(CliTest):
    def setUp(self):
        super().setUp()
        self.recipe = self.write("grpo.lua", ARGS_RECIPE)

    def test_values_reach_the_recipe(self):
        p = rlhost(self.recipe, "--model-path", "m", "--rollout-batch-size=16", "--use-kl-loss",
                   "--eval-datasets", "a", "b", "--lr", "3e-4", "run.pt")
        self.assertExit(p, 0)
        self.assertEqual(
            p.stdout.splitlines()[0],
            '{"advantage_estimator":"grpo","dump":"run.pt","eval_datasets":["a","b"],"lr":0.0003,'
            '"model_path":"m","rollout_batch_size":16,"use_kl_loss":true}')

    def test_recipe_help(self):
        p = rlhost(self.recipe, "--help")
        self.assertExit(p, 0)
        out = p.stdout
        self.assertIn("usage: rlhost %s [options] [DUMP]" % self.recipe, out)
        self.assertIn("GRPO on GSM8K", out)
        self.assertIn("--rollout-batch-size INT", out)
        self.assertIn("prompts per rollout step [int, default: 32]", out)
        self.assertIn("[number, default: 1e-06]", out)
        self.assertIn("--[no-]use-kl-loss", out)
        self.assertIn("one of: grpo, reinforce_plus_plus, default: grpo", out)
        self.assertIn("--model-path STR", out)
        self.assertIn("required", out)
        self.assertIn("--log-level LEVEL", out)
        self.assertNotIn('"model_path"', out, "the recipe stopped at --help")
        self.assertExit(rlhost(self.recipe, "-h"), 0)

    def test_unknown_flag_suggests(self):
        p = rlhost(self.recipe, "--model-path", "m", "--rollout-batchsize", "4")
        self.assertExit(p, 2)
        self.assertIn("unknown option '--rollout-batchsize'; did you mean '--rollout-batch-size'?", p.stderr)
        self.assertIn("--help", p.stderr)
        self.assertNotIn("stack traceback", p.stderr)
        self.assertEqual(p.stdout, "")

    def test_bad_value_names_flag_and_type(self):
        p = rlhost(self.recipe, "--model-path", "m", "--rollout-batch-size", "abc")
        self.assertExit(p, 2)
        self.assertIn("--rollout-batch-size: expected an integer, got 'abc'", p.stderr)

    def test_bad_choice_lists_choices(self):
        p = rlhost(self.recipe, "--model-path", "m", "--advantage-estimator", "ppo")
        self.assertExit(p, 2)
        self.assertIn("grpo, reinforce_plus_plus", p.stderr)

    def test_missing_required(self):
        p = rlhost(self.recipe)
        self.assertExit(p, 2)
        self.assertIn("missing required option --model-path", p.stderr)

    def test_unexpected_positional(self):
        p = rlhost(self.recipe, "--model-path", "m", "a.pt", "b.pt")
        self.assertExit(p, 2)
        self.assertIn("unexpected argument 'b.pt'", p.stderr)


DEBUG_LINE = re.compile(r"\[debug\] \[[^\]]*grpo\.lua:12\] debug record")


class Signals(CliTest):
    def test_a_signal_during_the_interrupt_handler_reaches_it_next(self):
        # The first SIGTERM's handler is busy when the second arrives: the second must
        # reach the handler after it returns (not be raised inside it and lost).
        recipe = self.write("two_signals.lua", """\
            local n = 0
            rl.on_interrupt(function(sig)
              n = n + 1
              io.stderr:write(("handler %d %s\\n"):format(n, sig)); io.stderr:flush()
              if n == 1 then local t = os.clock(); while os.clock() - t < 1.5 do end end
              if n == 2 then rl.exit(7) end
              return true
            end)
            io.stderr:write("ready\\n"); io.stderr:flush()
            rl.sleep(60)
            """)
        p = subprocess.Popen([BIN, recipe], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=clean_env())
        try:
            self.assertEqual(p.stderr.readline().strip(), "ready")
            p.send_signal(signal.SIGTERM)
            self.assertEqual(p.stderr.readline().strip(), "handler 1 SIGTERM")
            p.send_signal(signal.SIGTERM)   # while the handler spins
            _, err = p.communicate(timeout=20)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.assertEqual(p.returncode, 7, err)
        self.assertIn("handler 2 SIGTERM", err)
        self.assertNotIn("handler failed", err)


class Logging(CliTest):
    def setUp(self):
        super().setUp()
        self.recipe = self.write("grpo.lua", ARGS_RECIPE)

    def test_default_level_hides_debug(self):
        p = rlhost(self.recipe, "--model-path", "m")
        self.assertExit(p, 0)
        self.assertNotIn("debug record", p.stderr)
        self.assertIn("info record", p.stderr)
        self.assertRegex(p.stderr, r"\[info\] \[[^\]]*grpo\.lua:13\] info record")

    def test_recipe_log_level_flag(self):
        p = rlhost(self.recipe, "--model-path", "m", "--log-level", "debug")
        self.assertExit(p, 0)
        self.assertRegex(p.stderr, DEBUG_LINE)

    def test_host_log_level_option(self):
        p = rlhost("--log-level", "debug", self.recipe, "--model-path", "m")
        self.assertExit(p, 0)
        self.assertRegex(p.stderr, DEBUG_LINE)
        p = rlhost("--log-level=warn", self.recipe, "--model-path", "m")
        self.assertExit(p, 0)
        self.assertNotIn("info record", p.stderr)

    def test_env_log_level(self):
        p = rlhost(self.recipe, "--model-path", "m", env=clean_env(RLHOST_LOG_LEVEL="debug"))
        self.assertExit(p, 0)
        self.assertRegex(p.stderr, DEBUG_LINE)
        p = rlhost(self.recipe, "--model-path", "m", env=clean_env(RLHOST_LOG_LEVEL="error"))
        self.assertExit(p, 0)
        self.assertNotIn("info record", p.stderr)
        # the command line wins over the environment
        p = rlhost("--log-level", "debug", self.recipe, "--model-path", "m", env=clean_env(RLHOST_LOG_LEVEL="error"))
        self.assertRegex(p.stderr, DEBUG_LINE)

    def test_bad_log_level(self):
        p = rlhost("--log-level", "loud", "-e", "print(1)")
        self.assertExit(p, 2)
        self.assertIn("loud", p.stderr)
        p = rlhost("-e", "print(1)", env=clean_env(RLHOST_LOG_LEVEL="loud"))
        self.assertExit(p, 2)
        self.assertIn("RLHOST_LOG_LEVEL", p.stderr)
        p = rlhost(self.recipe, "--model-path", "m", "--log-level", "loud")
        self.assertExit(p, 2)
        self.assertIn("--log-level: expected one of trace, debug, info, warn, error, critical, off, got 'loud'",
                      p.stderr)
        p = rlhost("--log-level")
        self.assertExit(p, 2)

    def test_rl_log_level_at_run_time(self):
        p = rlhost("-e", 'rl.log.debug("hidden"); rl.log.level("debug"); rl.log.debug("shown %d", 7)')
        self.assertExit(p, 0)
        self.assertNotIn("hidden", p.stderr)
        self.assertRegex(p.stderr, r"\[debug\] \[\(command line\):1\] shown 7")


class Install(CliTest):
    def test_cmake_install_finds_its_lua_library(self):
        cmake = shutil.which("cmake")
        build_dir = os.path.dirname(os.path.abspath(BIN))
        if not cmake:
            support.missing("cmake is not on PATH", "apt-get install cmake, or scripts/bootstrap.sh")
        if not os.path.exists(os.path.join(build_dir, "cmake_install.cmake")):
            support.missing("%s is not a CMake build directory" % build_dir,
                            "run the test on the binary of a CMake build (scripts/build.sh)")
        prefix = os.path.join(self.dir, "prefix")
        p = subprocess.run([cmake, "--install", build_dir, "--prefix", prefix],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        installed = os.path.join(prefix, "bin", "rlhost")
        self.assertTrue(os.access(installed, os.X_OK), installed)
        self.assertTrue(os.path.exists(os.path.join(prefix, "share", "rlhost", "lua", "rl", "init.lua")))

        env = clean_env()
        env.pop("RLHOST_LUA_DIR", None)
        cwd = os.path.join(self.dir, "cwd")
        os.makedirs(cwd)
        p = rlhost("-e", 'print(require("rl.json").encode({1}))',
                   "-e", 'print(package.searchpath("rl.json", package.path))',
                   binary=installed, env=env, cwd=cwd)
        self.assertExit(p, 0)
        lines = p.stdout.splitlines()
        self.assertEqual(lines[0], "[1]")
        found = os.path.realpath(lines[1])
        self.assertTrue(found.startswith(os.path.realpath(prefix) + os.sep),
                        "rl.json loaded from %s, not from the install prefix %s" % (found, prefix))
        p = rlhost("--version", binary=installed, env=env, cwd=cwd)
        self.assertExit(p, 0)
        # the default model's shipped weights are installed beside the library, and found there
        p = rlhost("-e", 'local w = require "rl.mathgen.warmup"; '
                   'print(w.shipped_dir("default-math-model-v" .. w.VERSION))',
                   binary=installed, env=env, cwd=cwd)
        self.assertExit(p, 0)
        shipped = p.stdout.strip()
        self.assertTrue(os.path.realpath(shipped).startswith(os.path.join(os.path.realpath(prefix), "share", "rlhost",
                                                                          "models") + os.sep), shipped)
        self.assertTrue(os.path.exists(os.path.join(shipped, "model.safetensors")), shipped)


if __name__ == "__main__":
    support.main()
