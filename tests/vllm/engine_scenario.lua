-- Driven by tests/vllm/test_vllm_engine.py: a real vLLM engine through rl.engine.
--   rlhost engine_scenario.lua MODEL_DIR ALTERED_WEIGHTS_DIR
-- Prints one JSON object with what it saw; the test asserts on it.
local rl = require "rl"
local model, altered = arg[1], arg[2]
local out = {}

-- misuse and a missing python: clear errors, no process
out.bad_backend = select(2, pcall(rl.engine.start, { model = model, backend = "sglangx" }))
out.bad_option = select(2, pcall(rl.engine.start, { model = model, backend = "vllm", kv_cache_tokens = 5 }))
local t = rl.spawn(function()
  local eng, err = rl.engine.start { model = model, backend = "vllm", python = "/nonexistent/bin/python" }
  out.bad_python = { eng = eng ~= nil, err = err }

  -- a server that cannot serve: a timeout stops it; one that exits is reported with its log
  local _, terr = rl.engine.start { model = model, backend = "vllm", ready_timeout = 1 }
  out.timeout_err = terr
  local _, xerr = rl.engine.start { model = model .. "/no-such-model", backend = "vllm", ready_timeout = 1200 }
  out.exit_err = xerr

  local e, serr = rl.engine.start { model = model, backend = "vllm", ready_timeout = 1200,
                                    vllm_args = { max_model_len = 384, ["max-num-seqs"] = 8 } }
  assert(e, serr)
  out.pid, out.url, out.log_file = e.pid, e.url, e.log_file
  local tok = assert(rl.tokenizer.load(model))
  local ids = tok:encode("Tom has 3 apples and buys 4 more. How many apples does he have?", { add_special_tokens = false })
  local function greedy(n)
    local r = assert(e:generate { input_ids = ids, return_logprob = true,
                                  sampling_params = { max_new_tokens = n or 8, temperature = 0 } })
    local lps = {}
    for i, it in ipairs(r.meta_info.output_token_logprobs) do lps[i] = it[1] end
    return { ids = r.output_ids, lps = lps, finish = r.meta_info.finish_reason.type,
             version = r.meta_info.weight_version, prompt_tokens = r.meta_info.prompt_tokens, text = r.text }
  end
  out.first = greedy()
  out.update_altered = assert(e:update_weights_from_disk(altered, "1"))
  out.altered = greedy()
  out.update_back = assert(e:update_weights_from_disk(model, "2"))
  out.back = greedy()
  out.stats = e:stats()

  -- abort: a long request, aborted while it runs
  local long = rl.spawn(function()
    return e:generate { input_ids = ids, return_logprob = true,
                        sampling_params = { max_new_tokens = 300, temperature = 1, ignore_eos = true } }
  end)
  local deadline = rl.now() + 300
  while rl.now() < deadline do
    local st = e:stats()
    if st and st.num_running > 0 then break end
    rl.sleep(0.05)
  end
  out.aborted_count = e:abort()
  local r = long:wait()
  out.aborted = { finish = r and r.meta_info.finish_reason.type, tokens = r and #r.output_ids,
                  lps = r and r.meta_info.output_token_logprobs and #r.meta_info.output_token_logprobs }
  e:stop()
  out.stopped_pid = e.pid or false
end)
t:wait()
print(rl.json.encode(out))
