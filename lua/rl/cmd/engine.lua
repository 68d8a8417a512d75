-- rlhost engine: serve a model over SGLang's HTTP API (and OpenAI's) until
-- SIGINT/SIGTERM.
--
--   rlhost engine --model /models/Qwen3-0.6B --port 30000
--   rlhost engine --model DIR --port 0 --ready-file /tmp/engine.url   # for parents that spawn it
--   rlhost engine --model DIR --host 0.0.0.0 --api-key SECRET          # remote: control needs the key
--
-- The flags are rl.engine.start's options in kebab-case; docs/engine.md lists
-- the endpoints.
local opt = rl.args {
  prog = "engine",
  description = "Serves a model with rlhost's native engine over SGLang's HTTP API (/generate, /v1/*, /metrics).",
  { name = "model", type = "string", required = true, help = "HF model directory (config.json + safetensors) or .gguf" },
  { name = "tokenizer", type = "string", help = "tokenizer directory or tokenizer.json (default: the model directory)" },
  { name = "served_model_name", type = "string", help = "name in /v1/models and metrics (default: the directory name)" },
  { name = "host", type = "string", default = "127.0.0.1", help = "bind address; non-loopback needs --api-key" },
  { name = "port", type = "int", default = 30000, help = "port (0: any free one)" },
  { name = "api_key", type = "string", help = "Bearer token for control endpoints (required off loopback)" },
  { name = "dtype", type = "string", default = "auto", choices = { "auto", "float32", "bfloat16", "float16" } },
  { name = "device", type = "string", default = "cpu", help = "cpu | cuda | cuda:N" },
  { name = "max_running_requests", type = "int", default = 64, help = "sequences decoding at once" },
  { name = "kv_cache_tokens", type = "int", default = 0, help = "KV cache size in tokens (0: from --kv-cache-bytes)" },
  { name = "kv_cache_bytes", type = "int", default = 1073741824, help = "KV cache size in bytes when --kv-cache-tokens is 0" },
  { name = "block_size", type = "int", default = 16, help = "tokens per KV block" },
  { name = "max_prefill_tokens", type = "int", default = 8192, help = "new prompt tokens per step" },
  { name = "context_length", type = "int", default = 0, help = "0: the config's max_position_embeddings" },
  { name = "threads", type = "int", default = 0, help = "LibTorch intra-op threads (0: leave as is)" },
  { name = "max_connections", type = "int", default = 4096, help = "open client connections (beyond: closed at once)" },
  { name = "max_sequences_per_request", type = "int", default = 4096,
    help = "prompts x n in one request (beyond: 400); 0 = no cap" },
  { name = "max_queued_requests", type = "int", default = 16384,
    help = "sequences waiting beyond --max-running-requests (beyond: 429 + Retry-After); 0 = no cap" },
  { name = "max_tokens_in_flight", type = "int", default = 0,
    help = "prompt + max_new_tokens of unfinished sequences (beyond: 429 + Retry-After); 0 = no cap" },
  { name = "max_top_logprobs", type = "int", default = 20,
    help = "top log-probs per position a request may ask for (top_logprobs_num, logprobs; beyond: 400)" },
  { name = "max_response_entries", type = "int", default = 4194304,
    help = "values one response may hold: output tokens x (id + log-prob + top log-probs), counted for the longest "
      .. "output each request may produce (beyond: 400); 0 = no cap" },
  { name = "shutdown_timeout", type = "number", default = 5,
    help = "on SIGTERM/Ctrl-C: seconds to let running requests finish before aborting them" },
  { name = "disable_prefix_cache", type = "bool", default = false, help = "no prefix reuse across requests" },
  { name = "cuda_graph_max_bs", type = "int", default = 256,
    help = "CUDA: decode batches up to this size replay CUDA graphs (0: none)" },
  { name = "disable_cuda_graph", type = "bool", default = false, help = "CUDA: run every step eagerly" },
  { name = "overlap_schedule", type = "string", default = "auto",
    help = "launch the next decode step before the last one's tokens reach the host: auto (on for CUDA) | on | off" },
  { name = "disable_overlap_schedule", type = "bool", default = false, help = "SGLang's flag: --overlap-schedule off" },
  { name = "weight_version", type = "string", default = "default", help = "reported in meta_info until the first update" },
  { name = "ready_file", type = "string", help = "write the server URL to this file once serving" },
}

rl.script = "engine"  -- usage errors say `rlhost engine`, not the path of this file
if opt.port < 0 or opt.port > 65535 then rl.args.usage_error("--port must be 0-65535") end
if opt.max_running_requests < 1 then rl.args.usage_error("--max-running-requests must be at least 1") end
if opt.cuda_graph_max_bs < 0 then rl.args.usage_error("--cuda-graph-max-bs must be 0 or more") end
for _, k in ipairs { "max_connections", "max_sequences_per_request", "max_queued_requests", "max_tokens_in_flight",
                     "max_top_logprobs", "max_response_entries" } do
  if opt[k] < 0 then rl.args.usage_error("--" .. k:gsub("_", "-") .. " must be 0 or more") end
end
if opt.max_connections < 1 then rl.args.usage_error("--max-connections must be at least 1") end
if opt.shutdown_timeout < 0 then rl.args.usage_error("--shutdown-timeout must be 0 or more") end

local native = rl.engine._native()
native.forward_sigterm()  -- SIGTERM stops gracefully, like Ctrl-C

local server_args = {}
for k, v in pairs(opt) do server_args[k] = v end
server_args.api_key, server_args.ready_file = nil, nil

local started, eng, err = pcall(rl.engine.start, {
  model = opt.model, tokenizer = opt.tokenizer, served_model_name = opt.served_model_name,
  host = opt.host, port = opt.port, api_key = opt.api_key, dtype = opt.dtype, device = opt.device,
  max_running_requests = opt.max_running_requests, kv_cache_tokens = opt.kv_cache_tokens,
  kv_cache_bytes = opt.kv_cache_bytes, block_size = opt.block_size, max_prefill_tokens = opt.max_prefill_tokens,
  context_length = opt.context_length, threads = opt.threads, max_connections = opt.max_connections,
  max_sequences_per_request = opt.max_sequences_per_request, max_queued_requests = opt.max_queued_requests,
  max_tokens_in_flight = opt.max_tokens_in_flight, max_top_logprobs = opt.max_top_logprobs,
  max_response_entries = opt.max_response_entries,
  enable_prefix_cache = not opt.disable_prefix_cache, weight_version = opt.weight_version,
  cuda_graph_max_bs = opt.cuda_graph_max_bs, disable_cuda_graph = opt.disable_cuda_graph,
  overlap_schedule = opt.disable_overlap_schedule and "off" or opt.overlap_schedule,
  server_args = rl.json.encode(server_args),
})
if not started then rl.args.option_error(eng, "rl.engine.start") end   -- a flag out of range: name it
if not eng then
  io.stderr:write("rlhost engine: ", err, "\n")
  rl.exit(1)
end

if opt.ready_file then
  -- Atomic: a parent polling the file never reads half a URL.
  local tmp = opt.ready_file .. ".tmp"
  local f, ferr = io.open(tmp, "w")
  if not f then
    eng:stop()
    io.stderr:write("rlhost engine: cannot write --ready-file: ", ferr, "\n")
    rl.exit(1)
  end
  f:write(eng.url, "\n")
  f:close()
  assert(os.rename(tmp, opt.ready_file))
end
rl.log.info("rlhost engine: serving %s at %s (Ctrl-C or SIGTERM stops)", opt.model, eng.url)
rl.log.info("rlhost engine: control endpoints (weights, memory, profile, abort, flush)"
  .. " " .. require("rl._admin").hint() .. (opt.api_key and "; the --api-key works too" or ""))

local ok, werr = pcall(function()
  while true do rl.sleep(3600) end
end)
rl.log.info("rlhost engine: stopping (running requests get up to %gs to finish)", opt.shutdown_timeout)
eng:stop(opt.shutdown_timeout)
if opt.ready_file then os.remove(opt.ready_file) end
if not ok and not rl.task.is_cancelled(werr) then error(werr, 0) end
