-- Driven by tests/vllm/test_vllm_recipe.py: a vLLM server started "elsewhere" (this process,
-- not the recipe's) for --rollout-external.   rlhost serve_vllm.lua MODEL_DIR URL_FILE
-- Writes the server's URL to URL_FILE once it serves, then keeps it up until killed.
local rl = require "rl"
local model, url_file = arg[1], arg[2]
local t = rl.spawn(function()
  local e = assert(rl.engine.start { model = model, backend = "vllm", ready_timeout = 1200,
                                     vllm_args = { ["max-num-seqs"] = 16 } })
  local f = assert(io.open(url_file .. ".tmp", "w"))
  f:write(e.url, "\n")
  f:close()
  os.rename(url_file .. ".tmp", url_file)
  while true do rl.sleep(1) end
end)
t:wait()
