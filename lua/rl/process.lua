--- rl.process: side processes (Prometheus, a tool run by a test) without
--- blocking the event loop.
--
--   local p = assert(rl.process.spawn({ "prometheus", "--config.file", cfg }, { log = "prom.log" }))
--   ...; p:stop()                                   -- SIGTERM, SIGKILL after `grace` seconds
--   local code, out = rl.process.run({ rl.process.self(), "tools/x.lua", "--flag" }, { timeout = 60 })
--
-- The program is looked up in PATH (through /bin/sh's exec, so arguments are
-- never re-parsed by a shell). Waiting polls without blocking: other tasks run.
-- A child never outlives this process: it gets SIGTERM when we die (even by
-- SIGKILL), runs in its own process group (signals here reach the group) with
-- stdin from /dev/null, and the host stops any left at exit.
local core = require "rl._core"
local task = require "rl.task"

local cr = core.process  -- spawn/kill/reap (bindings/core_process.cpp, runtime/base/child_process.hpp)
local M = {}

local Process = {}
Process.__index = Process

local SIGTERM, SIGKILL, SIGCONT = 15, 9, 18
-- "$@" is the program and its arguments: no quoting involved.
local WRAP = 'exec "$@"'

local function check_argv(fname, argv)
  if type(argv) ~= "table" or #argv == 0 then
    error(fname .. ": bad argument #1 'argv' (non-empty list of strings expected, got " .. type(argv) .. ")", 3)
  end
  for i, a in ipairs(argv) do
    if type(a) ~= "string" and type(a) ~= "number" then
      error(("%s: bad argument #1 'argv' (argv[%d] is a %s, string expected)"):format(fname, i, type(a)), 3)
    end
  end
end

--- The path of this rlhost binary.
function M.self()
  local p = io.popen("readlink /proc/" .. tostring(M.pid()) .. "/exe")
  local s = p and p:read("*l")
  if p then p:close() end
  return s
end

--- This process's id.
function M.pid()
  local f = io.open("/proc/self/stat")
  if not f then return nil end
  local s = f:read("*l")
  f:close()
  return tonumber(s:match("^(%d+)"))
end

--- Pins this whole process — every thread it has, and so those they start later — to the
--- CPUs of `list` ("0-3,6", as taskset and Slurm write it); returns the list as applied.
--- Raises naming the list, or the CPUs this process may not use. A process engine applies
--- its `cpus` option with it (the trainer's own work: rl.trainer's tr:set_cpus).
local unpinned   -- the CPUs before the first set_cpus
function M.set_cpus(list)
  if type(list) ~= "string" and type(list) ~= "number" then
    error("rl.process.set_cpus: bad argument #1 'list' (a CPU list such as \"0-3,6\" expected, got " .. type(list) .. ")", 2)
  end
  local before = cr.cpus()
  local applied = cr.set_cpus(tostring(list))
  unpinned = unpinned or before
  return applied
end

--- The CPUs this process may run on ("0-3,6").
function M.cpus() return cr.cpus() end

--- The CPUs this process had before set_cpus pinned it (nil when it never did): what a
--- child that should not share the pinned ones (a process engine) gets back.
function M.unpinned_cpus() return unpinned end

--- The full path of `name` in PATH (or `name` itself when it holds a slash and
--- is executable), or nil.
function M.which(name)
  if type(name) ~= "string" or name == "" then return nil end
  local function executable(p)
    local f = io.open(p, "rb")
    if not f then return false end
    f:close()
    local r = os.execute("test -x " .. M.quote(p))
    return r == 0 or r == true
  end
  if name:find("/", 1, true) then return executable(name) and name or nil end
  for dir in (os.getenv("PATH") or "/usr/bin:/bin"):gmatch("[^:]+") do
    local p = dir .. "/" .. name
    if executable(p) then return p end
  end
  return nil
end

--- Starts argv[1] with the rest as arguments. opts.log: append stdout and
--- stderr to this file (default: inherited). Returns a process handle
--- {pid, argv, log} or nil, err.
function M.spawn(argv, opts)
  check_argv("rl.process.spawn", argv)
  opts = opts or {}
  if opts.log ~= nil and type(opts.log) ~= "string" then
    error("rl.process.spawn: bad argument 'opts.log' (string expected, got " .. type(opts.log) .. ")", 2)
  end
  local prog = tostring(argv[1])
  if not prog:find("/", 1, true) and not M.which(prog) then
    return nil, ("rl.process.spawn: '%s' not found in PATH (%s)"):format(prog, os.getenv("PATH") or "")
  end
  local full = { "/bin/sh", "-c", WRAP, "rl.process" }
  for _, a in ipairs(argv) do full[#full + 1] = tostring(a) end
  local pid, err = cr.spawn(full, { log = opts.log, death_signal = SIGTERM })   -- the log: appended, mode 0600
  if not pid then return nil, "rl.process.spawn: " .. tostring(err) end
  return setmetatable({ pid = pid, argv = argv, log = opts.log }, Process)
end

--- `s` as one shell word: unchanged when no shell treats any of its characters specially,
--- else in single quotes (a quote inside becomes '\''). For the few commands that go
--- through a shell (os.execute, io.popen) and command lines shown in logs.
function M.quote(s)
  s = tostring(s)
  if s ~= "" and s:match("^[%w%./_=:,+@%%-]+$") then return s end
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

--- Waits until child `pid` (spawned here) has exited and reaps it, checking on the event
--- loop's timers (other tasks run; needs a task): its exit code (128 + signal when killed),
--- or nil after `timeout` seconds (nil: no limit).
function M.wait_pid(pid, timeout)
  local deadline = timeout and (core.loop.now() + timeout)
  while true do
    local code = cr.reap(pid)
    if code then return code end
    if deadline and core.loop.now() > deadline then return nil end
    task.sleep(0.02)
  end
end

--- SIGTERM to child `pid`'s process group, SIGKILL when it has not exited after `grace`
--- seconds; waits until it is reaped (needs a task). → its exit code.
function M.stop_pid(pid, grace)
  cr.kill(pid, SIGTERM)
  cr.kill(pid, SIGCONT)   -- a stopped child handles the SIGTERM at once instead of waiting out the grace
  local code = M.wait_pid(pid, grace)
  if code then return code end
  cr.kill(pid, SIGKILL)
  return M.wait_pid(pid)
end

--- Sends `signal` to child `pid`'s process group; false when it is gone.
function M.signal_pid(pid, signal) return cr.kill(pid, signal) end

--- True while the process runs (reaps it once it has exited; then `code` is set).
function Process:running()
  if self.code then return false end
  local code = cr.reap(self.pid)
  if code == nil then return true end
  self.code = code
  return false
end

--- Waits (polling, other tasks run) until the process exits: its exit code
--- (128 + signal when killed), or nil, "timeout" after `timeout` seconds.
function Process:wait(timeout)
  if self.code then return self.code end
  local code = M.wait_pid(self.pid, timeout)
  if not code then return nil, "timeout" end
  self.code = code
  return code
end

--- Sends `signal` (default SIGTERM = 15); false when the process is gone.
function Process:kill(signal)
  if self.code then return false end
  return cr.kill(self.pid, signal or SIGTERM)
end

--- SIGTERM, then SIGKILL when it has not exited after `grace` seconds (5);
--- returns the exit code.
function Process:stop(grace)
  if not self:running() then return self.code end
  self:kill(SIGTERM)
  local code = self:wait(grace or 5)
  if code then return code end
  self:kill(SIGKILL)
  return self:wait(5)
end

--- Runs argv to completion: exit code and its combined stdout+stderr, or nil,
--- err (could not start; or "timeout" — the process is killed).
function M.run(argv, opts)
  check_argv("rl.process.run", argv)
  opts = opts or {}
  local log = os.tmpname()
  local p, err = M.spawn(argv, { log = log })
  if not p then os.remove(log); return nil, err end
  local code = p:wait(opts.timeout)
  if not code then p:stop(1) end
  local f = io.open(log, "rb")
  local out = f and f:read("*a") or ""
  if f then f:close() end
  os.remove(log)
  if not code then return nil, ("rl.process.run: %s did not finish within %s s; output:\n%s"):format(tostring(argv[1]), tostring(opts.timeout), out) end
  return code, out
end

M.Process = Process
return M
