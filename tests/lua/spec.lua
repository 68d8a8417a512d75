-- A small spec runner, run by rlhost itself:
--   rlhost tests/lua/spec.lua tests/lua/task_spec.lua [more_spec.lua...] [--filter PATTERN]
--
-- Spec files use the globals below. Every `it` runs in its own task, so tests
-- may sleep, make HTTP requests and spawn tasks; a test that takes longer than
-- its timeout (default 60 s, `it(name, fn, {timeout = s})`) fails.
--
--   describe("rl.json", function()
--     it("round-trips", function()
--       eq(rl.json.decode("[1]"), {1})
--       raises(function() rl.json.encode(print) end, "cannot encode a function")
--     end)
--   end)
--
-- A test that cannot run (a peer or tool is missing) calls skip(what, hint): it stops there
-- and counts as skipped, and the runner exits 77, which ctest shows as Skipped
-- (SKIP_RETURN_CODE), when nothing failed. Under CI=true a skip is a failure naming
-- what is missing and how to install it. Missing test data raises: it never skips.
local rl = require "rl"

-- RLHOST_TEST_DEVICE=cuda (or cuda:N): the LibTorch specs' models, engines and trainers
-- that name no device run there (rl.device.set_default); CPU otherwise.
local test_device = os.getenv("RLHOST_TEST_DEVICE")
if test_device and test_device ~= "" and test_device ~= "cpu" then
  rl.device.set_default(test_device)
  io.stderr:write("spec: LibTorch work on " .. rl.device.default() .. " (RLHOST_TEST_DEVICE)\n")
end

local tests, prefix, filter = {}, {}, nil
local SKIP_EXIT = 77   -- ctest's SKIP_RETURN_CODE (tests/CMakeLists.txt)
local CI = ({ ["1"] = true, ["true"] = true, ["yes"] = true })[(os.getenv("CI") or ""):lower()] or false
local skip_reason   -- set by skip() in the test now running
local before = {}

local function deep_eq(a, b, seen)
  if a == b then return true end
  if type(a) ~= "table" or type(b) ~= "table" then return false end
  seen = seen or {}
  if seen[a] == b then return true end
  seen[a] = b
  for k, v in pairs(a) do if not deep_eq(v, b[k], seen) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

local function show(v)
  local ok, inspect = pcall(require, "rl.inspect")
  if ok and type(inspect) == "table" and inspect.format then return inspect.format(v) end
  if type(v) == "string" then return string.format("%q", v) end
  return tostring(v)
end

local spec_dir = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
--- A path in the test data (tests/data, unpacked into <build>/test-data when the build
--- is configured): $RLHOST_TEST_DATA (ctest sets it), else build/test-data of this
--- checkout. Missing data raises (the spec fails naming the folder); it never skips.
function test_data(path)
  local dir = os.getenv("RLHOST_TEST_DATA") or (spec_dir .. "/../../build/test-data")
  local f = io.open(dir .. "/README.md")
  if not f then
    error("test data not found in " .. dir .. " (configuring the build unpacks tests/data there; or set RLHOST_TEST_DATA)", 2)
  end
  f:close()
  return dir .. "/" .. path
end

--- A fresh temporary path (nothing is created there; mkdir = true makes the directory).
function tmpdir(mkdir)
  local d = os.tmpname()
  os.remove(d)
  if mkdir then assert(os.execute("mkdir -p '" .. d .. "'") == 0) end
  return d
end

--- The file's bytes, or nil when it cannot be opened.
function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

--- Whether a file or directory is there.
function path_exists(path)
  local f = io.open(path, "r")
  if f then f:close() end
  return f ~= nil
end

--- Writes bytes to path, making its directory first (raises when it cannot).
function write_file(path, bytes)
  local parent = path:match("^(.*)/[^/]+$")
  if parent and parent ~= "" then os.execute("mkdir -p '" .. parent:gsub("'", "'\\''") .. "'") end
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
end

--- The test cannot run here: `what` is missing, `hint` says how to install it. Stops the
--- test; it counts as skipped (under CI=true, as failed, with the same text).
function skip(what, hint)
  local msg = tostring(what) .. (hint and (": " .. hint) or "")
  if CI then error("CI=true and a test peer is missing: " .. msg, 2) end
  skip_reason = msg
  error("skipped: " .. msg, 2)
end

function describe(name, fn)
  prefix[#prefix + 1] = name
  local saved = #before
  fn()
  for i = #before, saved + 1, -1 do before[i] = nil end
  prefix[#prefix] = nil
end

function before_each(fn) before[#before + 1] = fn end

function it(name, fn, opts)
  local full = table.concat(prefix, " ") .. (#prefix > 0 and " " or "") .. name
  local hooks = { unpack(before) }
  tests[#tests + 1] = { name = full, fn = fn, hooks = hooks, timeout = opts and opts.timeout or 60 }
end

function eq(actual, expected, msg)
  if not deep_eq(actual, expected) then
    error((msg and msg .. ": " or "") .. "expected " .. show(expected) .. ", got " .. show(actual), 2)
  end
end

function ok(v, msg)
  if not v then error(msg or "expected a true value, got " .. show(v), 2) end
  return v
end

function near(actual, expected, tol, msg)
  tol = tol or 1e-6
  if type(actual) ~= "number" or math.abs(actual - expected) > tol then
    error((msg and msg .. ": " or "") .. ("expected %s ± %g, got %s"):format(tostring(expected), tol, show(actual)), 2)
  end
end

-- raises(fn, pattern): fn must raise an error whose text contains `pattern` (plain).
function raises(fn, pattern)
  local okk, err = pcall(fn)
  if okk then error("expected an error" .. (pattern and (" matching '" .. pattern .. "'") or ""), 2) end
  local text = tostring(err)
  if pattern and not text:find(pattern, 1, true) then
    error("error '" .. text .. "' does not contain '" .. pattern .. "'", 2)
  end
  return err
end

-- ---- run -----------------------------------------------------------------------------
local files = {}
local i = 1
while i <= #rl.argv do
  local a = rl.argv[i]
  if a == "--filter" then filter = rl.argv[i + 1]; i = i + 1 else files[#files + 1] = a end
  i = i + 1
end
if #files == 0 then
  io.stderr:write("usage: rlhost tests/lua/spec.lua FILE_spec.lua... [--filter PATTERN]\n")
  rl.exit(2)
end
for _, f in ipairs(files) do
  local chunk, err = loadfile(f)
  if not chunk then error(err, 0) end
  chunk()
end

local passed, failed, failures, skipped = 0, 0, {}, {}
for _, t in ipairs(tests) do
  if not filter or t.name:find(filter, 1, true) then
    skip_reason = nil
    local started = rl.now()
    local task = rl.spawn(function()
      for _, h in ipairs(t.hooks) do h() end
      t.fn()
    end)
    local timer = rl.after(t.timeout, function() task:cancel("timed out after " .. t.timeout .. " s") end)
    local okk, err = pcall(task.wait, task)
    timer:cancel()
    local ms = (rl.now() - started) * 1000
    if okk then
      passed = passed + 1
      io.write(("ok    %s (%.0f ms)\n"):format(t.name, ms))
    elseif skip_reason then
      skipped[#skipped + 1] = t.name .. ": " .. skip_reason
      io.write(("SKIP  %s: %s\n"):format(t.name, skip_reason))
    else
      failed = failed + 1
      local msg = task.traceback or tostring(err)
      failures[#failures + 1] = t.name .. "\n    " .. msg:gsub("\n", "\n    ")
      io.write(("FAIL  %s (%.0f ms)\n"):format(t.name, ms))
    end
    io.flush()
  end
end
for _, f in ipairs(failures) do io.write("\n--- ", f, "\n") end
if #skipped > 0 then
  io.write(("\n%d skipped (a peer or tool is missing; CI=true fails them):\n"):format(#skipped))
  for _, s in ipairs(skipped) do io.write("  SKIPPED ", s, "\n") end
end
io.write(("%d passed, %d failed, %d skipped\n"):format(passed, failed, #skipped))
if failed > 0 then rl.exit(1) end
if passed + #skipped == 0 then
  io.write("no test ran", filter and (" (nothing matches --filter '" .. filter .. "')") or "", "\n")
  rl.exit(1)
end
if #skipped > 0 then rl.exit(SKIP_EXIT) end
