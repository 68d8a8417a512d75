-- Decode tokens/s of rlhost's engine on a GPU (bench/gpu/decode.sh runs it beside its
-- PyTorch and transformers peers): B requests of a `prompt`-token prompt, each
-- generating `new` tokens (greedy, ignore_eos), submitted together. The decode rate
-- counts the tokens after each request's first over the time after the last prefill.
-- With a trace folder, a profile of `new` / 2 decode steps at each batch size is
-- written there through /start_profile (kineto; bench/gpu/trace_busy.py reads it).
--   rlhost bench/gpu/decode.lua MODEL_DIR [batches=1,8,64,256] [new=128] [prompt=16] [trace_dir] [k=v engine options]
local model = assert(arg[1], "usage: decode.lua MODEL_DIR [batches] [new] [prompt] [trace_dir] [k=v ...]")
local batches = {}
for b in (arg[2] or "1,8,64,256"):gmatch("%d+") do batches[#batches + 1] = tonumber(b) end
local new, prompt, trace_dir = tonumber(arg[3]) or 128, tonumber(arg[4]) or 16, arg[5] ~= "" and arg[5] or nil
local max_b = 1
for _, b in ipairs(batches) do max_b = math.max(max_b, b) end
local opts = {
  model = model, device = "cuda", dtype = "bfloat16", serve = trace_dir ~= nil, max_running_requests = max_b,
  kv_cache_tokens = max_b * (prompt + new + 32), enable_prefix_cache = false,
}
for i = 6, #arg do
  local k, v = arg[i]:match("^([%w_]+)=(.*)$")
  if k then opts[k] = tonumber(v) or (v == "true" and true) or (v == "false" and false) or v end
end
local cfg = rl.json.decode(assert(io.open(model .. "/config.json")):read("*a"))
local eng = assert(rl.engine.start(opts))

local function prompts(b, salt)
  local list = {}
  for i = 1, b do
    local ids = {}
    for j = 1, prompt do ids[j] = (salt * 7919 + i * 131 + j * 17) % cfg.vocab_size end
    list[i] = ids
  end
  return list
end

local function run(b, n, salt)
  local t0 = rl.now()
  local out = assert(eng:generate { input_ids = prompts(b, salt),
    sampling_params = { max_new_tokens = n, temperature = 0, ignore_eos = true } })
  local total, first = rl.now() - t0, 0
  for _, o in ipairs(out) do
    local m = o.meta_info
    assert(m.completion_tokens == n, "a request stopped early")
    first = math.max(first, (m.queue_time or 0) + (m.prefill_time or 0))
  end
  return total, first
end

local function profile(b)
  local http = require "rl.http"
  local body = { output_dir = trace_dir, num_steps = math.max(8, math.floor(new / 2)),
                                activities = { "CPU", "GPU" }, profile_id = "rlhost_b" .. b }
  local resp = assert(http.post(eng.url .. "/start_profile", body,
    { headers = rl.engine.control_headers(), timeout = 60 }))
  assert(resp.status == 200, "start_profile: HTTP " .. resp.status .. " " .. resp.body)
  run(b, new, 2)
  rl.sleep(0.5)  -- the trace is written on the engine thread after the last profiled step
end

do
  run(1, 8, 0)  -- warm-up: allocations, the GEMM handles
  for _, b in ipairs(batches) do run(b, 4, 1) end  -- each batch size's CUDA graph captured before timing
  for _, b in ipairs(batches) do
    local total, first = run(b, new, 3)
    local st = eng:stats()
    print(("RESULT impl=rlhost batch=%d new=%d total_s=%.3f decode_tok_s=%.1f cuda_graphs=%d cuda_graph_steps=%d overlap_steps=%d steps=%d")
      :format(b, new, total, b * (new - 1) / (total - first), st.cuda_graphs or 0, st.cuda_graph_steps or 0,
        st.overlap_steps or 0, st.steps))
    io.stdout:flush()
    if trace_dir then profile(b) end
  end
  eng:stop()
end
