-- rl.torch: the LibTorch module loads on demand and its errors cross the boundary cleanly.
local rl = require "rl"

describe("rl.torch", function()
  it("loads librlhost_torch.so on first use and reports LibTorch facts", function()
    local info = rl.torch.info()
    ok(info.version:match("^%d+%.%d+%.%d+"), "version " .. tostring(info.version))
    ok(info.num_threads >= 1)
    eq(info.kernel_threads, info.num_threads)  -- our kernels fork as wide as LibTorch's (cmake/Torch.cmake)
    eq(type(info.cuda_built), "boolean")
    if not info.cuda_available then eq(info.cuda_devices, 0) end
  end)

  it("a c10::Error becomes a Lua error naming the function, without a C++ backtrace", function()
    local err = raises(function() rl.torch.set_num_threads(0) end,
      "rl.torch.set_num_threads: Expected positive number of threads")
    ok(not tostring(err):find("Exception raised from", 1, true), "no C++ backtrace in: " .. tostring(err))
    rl.torch.set_num_threads(1)
    eq(rl.torch.info().num_threads, 1)
  end)

  it("bad arguments are named", function()
    raises(function() rl.torch.manual_seed("x") end, "rl.torch.manual_seed: bad argument #1 'seed' (number expected, got string)")
  end)

  it("the CPU block cache is LibTorch's allocator once rl.torch loads; RLHOST_CPU_BLOCK_CACHE is checked", function()
    local bc = rl.torch.block_cache()
    eq(bc.installed, true)
    ok(bc.hits >= 0 and bc.misses >= 0 and bc.live_bytes >= 0 and bc.cached_bytes >= 0)
    local function host(setting, code)
      return rl.process.run({ "env", "RLHOST_CPU_BLOCK_CACHE=" .. setting, rl.process.self(), "-e", code }, { timeout = 60 })
    end
    local code, out = host("lots", "require('rl.torch').info()")
    ok(code ~= 0, out)
    ok(out:find("RLHOST_CPU_BLOCK_CACHE=lots: expected a whole number of MiB", 1, true), out)
    code, out = host("0", "print(require('rl.torch').block_cache().installed)")
    eq(code, 0, out)
    ok(out:find("false", 1, true), out)
  end)
end)

-- rl.device: device names checked against this build and machine (the CPU-only half of the
-- GPU issue's checks: on a GPU machine RLHOST_TEST_DEVICE=cuda runs the other specs there).
describe("rl.device", function()
  local info = rl.torch.info()

  it("resolves cpu, auto and cuda against the machine", function()
    eq(rl.device.resolve("cpu"), "cpu")
    eq(rl.device.resolve("auto"), info.cuda_available and "cuda:0" or "cpu")
    if info.cuda_available then
      eq(rl.device.resolve("cuda"), "cuda:0")
    else
      local d, err = rl.device.resolve("cuda", "--device")
      eq(d, nil)
      ok(err:find("^%-%-device: cuda asked for"), err)
      ok(err:find(info.cuda_built and "no GPU is usable" or "built without CUDA", 1, true), err)
      ok(err:find("hint:", 1, true), err)
      d, err = rl.device.resolve("cuda:3")
      eq(d, nil)
      ok(err:find("cuda:3 asked for", 1, true), err)
    end
  end)

  it("names the option and the accepted names for a bad device", function()
    local d, err = rl.device.resolve("gpu0", "opts.device")
    eq(d, nil)
    eq(err, "opts.device: 'gpu0' is not a device (use cpu, cuda, cuda:N or auto)")
    d, err = rl.device.resolve(7, "opts.device")
    eq(d, nil)
    ok(err:find("a device name expected", 1, true), err)
    raises(function() rl.device.set_default("tpu") end, "'tpu' is not a device")
  end)

  it("loads, engines and trainers refuse a device the machine lacks, naming it", function()
    if info.cuda_available then return end
    local m, err = rl.model.load(test_data("models/stories260K"), { device = "cuda" })
    eq(m, nil)
    ok(err:find("rl.model.load: opts.device: cuda asked for", 1, true), err)
    local e
    e, err = rl.engine.start { model = test_data("models/stories260K"), device = "cuda:1", serve = false }
    eq(e, nil)
    ok(err:find("rl.engine.start: opts.device: cuda:1 asked for", 1, true), err)
    raises(function() rl.trainer.new { model = test_data("models/stories260K"), device = "cuda" } end,
      "opts.device: cuda asked for")
  end)

  it("the default follows set_default, then $RLHOST_DEVICE, then cpu", function()
    local env = os.getenv("RLHOST_DEVICE")
    local before = rl.device.default()
    rl.device.set_default("cpu")
    eq(rl.device.default(), "cpu")
    rl.device.set_default(nil)
    eq(rl.device.default(), (env and env ~= "") and env or "cpu")
    if before ~= rl.device.default() then rl.device.set_default(before) end
    -- a load that names no device lands on the default
    local m = assert(rl.model.load(test_data("models/stories260K")))
    ok(m:logprobs({ 1, 2, 3 })[1] ~= nil)
  end)
end)
