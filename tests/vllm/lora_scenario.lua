-- Driven by tests/vllm/test_vllm_lora.py: a vLLM engine serving LoRA through rl.engine.
--   rlhost lora_scenario.lua MODEL_DIR WORK_DIR
-- Prints one JSON object with what it saw; the test asserts on it.
local rl = require "rl"
local json = require "rl.json"
local model, work = arg[1], arg[2]
local out = {}
local t = rl.spawn(function()
  local e = assert(rl.engine.start { model = model, backend = "vllm", max_lora_rank = 4, ready_timeout = 1200 })
  out.url, out.log_file = e.url, e.log_file
  -- a fresh adapter (B = 0) of rank 4, as a trainer writes it
  local dir = work .. "/adapter"
  assert(rl.trainer.new { model = model, lora_rank = 4 }:save_lora(dir))
  local tok = assert(rl.tokenizer.load(model))
  local ids = tok:encode("Tom has 3 apples and buys 4 more.", { add_special_tokens = false })
  -- a rollout naming the adapter before it is loaded: vLLM says it does not exist (404),
  -- which the rollout retries (1 s apart) while the adapter arrives
  local ro = rl.rollout.new { url = e.url, backend = "vllm", lora_path = "policy", tokenizer = tok,
                              rollout_max_response_len = 4 }
  local loaded_at
  rl.spawn(function()
    rl.sleep(1.5)
    out.first_load = assert(e:load_lora("policy", dir, "7"))
    loaded_at = rl.now()
  end)
  local t0 = rl.now()
  local s = rl.sample.new { tokens = json.array(ids) }
  local ok, err = pcall(ro.generate, ro, s, { temperature = 0 })
  out.rollout = { ok = ok, err = not ok and tostring(err) or nil, waited = rl.now() - t0,
                  after_load = loaded_at ~= nil, response_length = s.response_length }
  -- the adapter replaced under its name: served, the version recorded; the first copy kept
  out.second_load = assert(e:load_lora("policy", dir, "8"))
  local r = assert(e:generate { input_ids = ids, lora_path = "policy", return_logprob = true,
                                sampling_params = { max_new_tokens = 4, temperature = 0 } })
  local b = assert(e:generate { input_ids = ids, return_logprob = true,
                                sampling_params = { max_new_tokens = 4, temperature = 0 } })
  out.adapter_ids, out.base_ids, out.version = r.output_ids, b.output_ids, r.meta_info.weight_version
  out.copies = {}
  for _, m in ipairs { out.first_load.message, out.second_load.message } do
    out.copies[#out.copies + 1] = m:match("loaded from (%S+)")
  end
  -- a rank above the server's: vLLM's 400, the adapter of that name kept out
  local big = work .. "/adapter16"
  assert(rl.trainer.new { model = model, lora_rank = 16 }:save_lora(big))
  local _, berr = e:load_lora("other", big)
  out.big_err = berr
  local again = e:generate { input_ids = ids, lora_path = "policy", sampling_params = { max_new_tokens = 2 } }
  out.serving_after = again ~= nil and #again.output_ids > 0
  e:stop()
end)
t:wait()
print(json.encode(out))
