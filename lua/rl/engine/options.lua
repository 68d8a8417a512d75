--- rl.engine.options: every option of an engine, declared once. rl.engine.start checks its
--- table against this list (lua/rl/_options.lua: one validator, one message shape), a
--- process-mode engine's child gets its flags from it, and `rlhost engine` declares its
--- command line from it (defaults and help included). The native engine's C++ defaults
--- (runtime/engine/engine.hpp EngineOptions, server.hpp ServerOptions) are the same values:
--- tests/lua/engine_spec.lua checks them against this list.
--
-- Entry fields beyond rl.args': min / max (ranges), cli_default (the command line's
-- default where it differs from the Lua API's: SGLang's port), flag = false (not a
-- flag of the child `rlhost engine`: Lua-side options), invert = "name" (the flag is the
-- option's negation: enable_prefix_cache is --disable-prefix-cache); rl._options.
local M = {}

--- rlhost's native engine (rl.engine.start{backend = "native"} and `rlhost engine`).
M.NATIVE = {
  { name = "model", type = "string", required = true, flag = false,
    help = "HF model directory (config.json + safetensors) or .gguf" },
  { name = "tokenizer", type = "string", help = "tokenizer directory or tokenizer.json (default: the model directory)" },
  { name = "served_model_name", type = "string", help = "name in /v1/models and metrics (default: the directory name)" },
  { name = "host", type = "string", default = "127.0.0.1", help = "bind address; non-loopback needs --api-key" },
  { name = "port", type = "int", default = 0, cli_default = 30000, min = 0, max = 65535, help = "port (0: any free one)" },
  { name = "api_key", type = "string", help = "Bearer token for control endpoints (required off loopback; a parent passes it as $RLHOST_API_KEY)" },
  { name = "dtype", type = "string", default = "auto", choices = { "auto", "float32", "bfloat16", "float16" } },
  { name = "device", type = "string", cli_default = "cpu", help = "cpu | cuda | cuda:N (rl.engine.start's default: rl.device.default())" },
  { name = "max_running_requests", type = "int", default = 64, min = 1, help = "sequences decoding at once" },
  { name = "kv_cache_tokens", type = "int", default = 0, min = 0,
    help = "KV cache size in tokens (0: from --kv-cache-bytes)" },
  { name = "kv_cache_bytes", type = "int", default = 1073741824, min = 1,
    help = "KV cache size in bytes when --kv-cache-tokens is 0" },
  { name = "block_size", type = "int", default = 16, min = 1, help = "tokens per KV block" },
  { name = "max_prefill_tokens", type = "int", default = 8192, min = 1, help = "new prompt tokens per step" },
  { name = "context_length", type = "int", default = 0, min = 0, help = "0: the config's max_position_embeddings" },
  { name = "threads", type = "int", default = 0, min = 0, help = "LibTorch intra-op threads (0: leave as is)" },
  { name = "max_connections", type = "int", default = 4096, min = 1,
    help = "open client connections (beyond: closed at once)" },
  { name = "max_sequences_per_request", type = "int", default = 4096, min = 0,
    help = "prompts x n in one request (beyond: 400); 0 = no cap" },
  { name = "max_queued_requests", type = "int", default = 16384, min = 0,
    help = "sequences waiting beyond --max-running-requests (beyond: 429 + Retry-After); 0 = no cap" },
  { name = "max_tokens_in_flight", type = "int", default = 0, min = 0,
    help = "prompt + max_new_tokens of unfinished sequences (beyond: 429 + Retry-After); 0 = no cap" },
  { name = "max_top_logprobs", type = "int", default = 20, min = 0,
    help = "top log-probs per position a request may ask for (top_logprobs_num, logprobs; beyond: 400)" },
  { name = "max_response_entries", type = "int", default = 4194304, min = 0,
    help = "values one response may hold: output tokens x (id + log-prob + top log-probs), counted for the longest "
      .. "output each request may produce (beyond: 400); 0 = no cap" },
  { name = "enable_prefix_cache", type = "bool", default = true, invert = "disable_prefix_cache",
    help = "no prefix reuse across requests" },
  { name = "cuda_graph_max_bs", type = "int", default = 256, min = 0,
    help = "CUDA: decode batches up to this size replay CUDA graphs (0: none)" },
  { name = "disable_cuda_graph", type = "bool", default = false, help = "CUDA: run every step eagerly" },
  { name = "overlap_schedule", type = "string", default = "auto", choices = { "auto", "on", "off" },
    help = "launch the next decode step before the last one's tokens reach the host: auto (on for CUDA) | on | off" },
  { name = "recompute_kv_on_weight_update", type = "bool", default = false,
    help = "a weight update mid-generation recomputes the running sequences' KV (default: kept; never reused for new requests)" },
  { name = "weight_version", type = "string", default = "default", help = "reported in meta_info until the first update" },
  { name = "lora_paths", type = "list", of = "string",
    help = "LoRA adapters to load at start: NAME=DIR (or DIR, named after it), PEFT directories" },
  { name = "max_loras_per_batch", type = "int", default = 8, min = 1,
    help = "distinct LoRA adapters in one step (requests under others wait)" },
  { name = "max_lora_rank", type = "int", default = 0, min = 0, help = "refuse LoRA adapters of a higher rank (0: any)" },
  -- prefill/decode disaggregation (SGLang's flags; docs/engine.md)
  { name = "disaggregation_mode", type = "string", default = "null", choices = { "null", "prefill", "decode" },
    help = "null: one engine does both; prefill: runs prompts and hands their K/V over; decode: takes them and decodes" },
  { name = "disaggregation_bootstrap_port", type = "int", default = 0, min = 0, max = 65535,
    help = "prefill: the bootstrap server's port, where decodes register (0: a free one; /get_server_info says which)" },
  { name = "disaggregation_transfer_backend", type = "string", default = "auto", choices = { "auto", "shm", "tcp" },
    help = "decode: how K/V arrive: shm (/dev/shm, one host), tcp (HTTP over TCP), auto (shm when the prefill is on loopback)" },
  { name = "disaggregation_transfer_timeout", type = "number", default = 60, min = 0.001,
    help = "seconds each prefill/decode wait may take (KV blocks, bootstrap, K/V) before the request fails" },
  { name = "disaggregation_kv_checksum", type = "bool", default = false,
    help = "both sides checksum the K/V rows; a mismatch fails the request" },
  -- Lua-side: how rl.engine runs it
  { name = "mode", type = "string", default = "thread", choices = { "thread", "process" }, flag = false,
    help = "thread: in this process; process: a child `rlhost engine`" },
  { name = "serve", type = "bool", default = true, flag = false, help = "thread mode: false = no HTTP server" },
  { name = "ready_timeout", type = "number", default = 300, min = 0, flag = false,
    help = "process mode: seconds to wait for the child to serve" },
  { name = "log_file", type = "string", flag = false, help = "process mode: the child's stdout and stderr" },
  { name = "server_args", type = "string", flag = false, help = "JSON object text echoed by /get_server_info" },
  { name = "backend", type = "string", default = "native", choices = { "native", "vllm" }, flag = false },
  { name = "cpus", type = "string",
    help = "process mode: pin the engine's process to these CPUs (\"0-3,6\"; default: every CPU it may use)" },
  { name = "nice", type = "int", min = 0, max = 19, flag = false,
    help = "process mode: the engine process's CPU priority (nice; 19: it runs on what the trainer leaves idle)" },
}

--- `rlhost engine`'s own flags (not rl.engine.start options).
M.CLI_ONLY = {
  { name = "shutdown_timeout", type = "number", default = 5, min = 0,
    help = "on SIGTERM/Ctrl-C: seconds to let running requests finish before aborting them" },
  { name = "ready_file", type = "string", help = "write the server URL to this file once serving" },
  { name = "disable_overlap_schedule", type = "bool", default = false, help = "SGLang's flag: --overlap-schedule off" },
}

--- backend = "vllm" (lua/rl/engine/vllm.lua): its own options, and the native ones a
--- recipe passes to every backend (vLLM has its own flags for them).
M.VLLM = {
  { name = "model", type = "string", required = true },
  { name = "backend", type = "string", choices = { "native", "vllm" } },
  { name = "host", type = "string" },
  { name = "port", type = "int", min = 0, max = 65535 },
  { name = "served_model_name", type = "string" },
  { name = "python", type = "string", help = "the python with vLLM" },
  { name = "vllm_args", type = "table", help = "vLLM's flags ({max_model_len = 384} -> --max-model-len 384)" },
  { name = "env", type = "table", help = "extra environment for the server" },
  { name = "ready_timeout", type = "number", min = 0 },
  { name = "log_file", type = "string" },
  { name = "kv_cache_space", type = "number", help = "VLLM_CPU_KVCACHE_SPACE in GiB" },
  { name = "weight_version", type = "string" },
  { name = "api_key", type = "string" },
  { name = "threads", type = "int", min = 0 },
  { name = "max_running_requests", type = "int", min = 1 },
  { name = "mode", type = "string" },
  { name = "device", type = "string", help = "cpu, or cuda:N (the server sees that GPU only)" },
  { name = "cpus", type = "string", help = "CPU list its OpenMP threads bind to (VLLM_CPU_OMP_THREADS_BIND)" },
  { name = "nice", type = "int", min = 0, max = 19, help = "the server process's CPU priority (nice)" },
  { name = "max_lora_rank", type = "int", min = 0,
    help = "> 0: serve LoRA adapters up to this rank, loaded at run time (:load_lora; --enable-lora)" },
}

local O = require "rl._options"

--- Checks rl.engine.start's table (fname: the public function) → the backend's mode
--- ("thread", "process" or "vllm").
function M.check(opts, fname)
  if type(opts) ~= "table" then
    error(("%s: bad argument #1 'opts' (table expected, got %s)"):format(fname, type(opts)), 3)
  end
  local backend = opts.backend or "native"
  if backend ~= "native" and backend ~= "vllm" then
    error(("%s: bad argument 'opts.backend' ('native' or 'vllm' expected, got %s)")
      :format(fname, type(backend) == "string" and ("'" .. backend .. "'") or type(backend)), 3)
  end
  if backend == "vllm" then
    O.check(fname, M.VLLM, opts, { level = 4, hint = " for backend 'vllm'; vLLM's own flags go in opts.vllm_args" })
    return "vllm"
  end
  O.check(fname, M.NATIVE, opts, { level = 4 })
  return opts.mode or "thread"
end

-- The native engine's and its server's options (what the C++ side takes), defaults filled.
local ENGINE_SIDE = {}
for _, o in ipairs(M.NATIVE) do if o.flag ~= false or o.name == "model" or o.name == "server_args" then ENGINE_SIDE[o.name] = true end end
ENGINE_SIDE.cpus = nil   -- the process's own placement (`rlhost engine` applies it), not the engine's

--- The options a thread-mode engine's native start takes: every engine and server option,
--- declared defaults filled in, plus serve.
function M.native(opts)
  local out = O.with_defaults(M.NATIVE, {}, ENGINE_SIDE)
  for k, v in pairs(opts) do if ENGINE_SIDE[k] or k == "serve" then out[k] = v end end
  return out
end

--- A process-mode child's flags for `opts` (those given; the child has the same defaults).
function M.argv(opts) return O.argv(M.NATIVE, opts) end

--- `rlhost engine`'s rl.args spec: every flag option, with the command line's defaults.
function M.cli_spec(spec) return O.cli_spec(M.NATIVE, spec, M.CLI_ONLY) end

--- rl.engine.start's table from `rlhost engine`'s parsed flags.
function M.from_cli(opt) return O.from_cli(M.NATIVE, opt) end

--- Checks `rlhost engine`'s parsed flags against the ranges of the declaration: a usage
--- error naming the flag.
function M.check_cli(opt)
  for _, o in ipairs(M.NATIVE) do
    local v = opt[o.name]
    if type(v) == "number" and ((o.min and v < o.min) or (o.max and v > o.max)) then
      local range = o.max and ("%d-%d"):format(o.min, o.max) or (o.min == 0 and "0 or more" or ("at least " .. o.min))
      require("rl.args").usage_error(("--%s must be %s (got %s)"):format(o.name:gsub("_", "-"), range, tostring(v)))
    end
  end
  for _, o in ipairs(M.CLI_ONLY) do
    local v = opt[o.name]
    if type(v) == "number" and o.min and v < o.min then
      require("rl.args").usage_error(("--%s must be 0 or more (got %s)"):format(o.name:gsub("_", "-"), tostring(v)))
    end
  end
end

return M
