-- rl.torch: the LibTorch module loads on demand and its errors cross the boundary cleanly.
local rl = require "rl"

describe("rl.torch", function()
  it("loads librlhost_torch.so on first use and reports LibTorch facts", function()
    local info = rl.torch.info()
    ok(info.version:match("^%d+%.%d+%.%d+"), "version " .. tostring(info.version))
    ok(info.num_threads >= 1)
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
end)
