-- rlhost tinker: serve the Tinker API (LoRA training and sampling clients) over local
-- models until SIGINT/SIGTERM; the official `tinker` SDK and tinker-cookbook run against
-- it through TINKER_BASE_URL (docs/tinker.md).
--
--   rlhost tinker --base-model /models/Qwen3-0.6B --port 8000
--   export TINKER_BASE_URL=http://127.0.0.1:8000 TINKER_API_KEY=$(cat ~/.cache/rlhost/tinker/api_key)
local opt = rl.args {
  prog = "tinker",
  description = "Serves the Tinker API (LoRA training and sampling clients) over local models.",
  { name = "base_model", type = "list", of = "string", default = {},
    help = "a model directory to serve (repeat or comma-separate for several); clients name it by its path" },
  { name = "host", type = "string", default = "127.0.0.1", help = "address to bind (loopback by default)" },
  { name = "port", type = "int", default = 8000, help = "port (0: a free one)" },
  { name = "api_key_file", type = "string",
    help = "file holding the API key clients must send (tml-...; created owner-only with a fresh key when missing; "
      .. "default ~/.cache/rlhost/tinker/api_key)" },
  { name = "checkpoint_dir", type = "string", help = "where tinker:// checkpoints live (default ~/.cache/rlhost/tinker)" },
  { name = "lora_alpha", type = "number", default = 32, help = "LoRA alpha of every adapter (scale alpha / rank)" },
  { name = "max_rank", type = "int", default = 128, help = "largest LoRA rank a client may ask for" },
  { name = "poll", type = "number", default = 20, help = "seconds a retrieve_future waits before try_again" },
  { name = "session_timeout", type = "number", default = rl.tinker.SESSION_TIMEOUT,
    help = "seconds without a heartbeat (the SDK sends one every 10 s) before a session expires and its "
      .. "training clients and samplers are released (0: never)" },
  { name = "min_checkpoint_ttl", type = "int", default = 3600,
    help = "shortest ttl_seconds a client may set on a checkpoint (seconds; Tinker's floor is 1 hour)" },
  { name = "jwt_auth", type = "bool", default = true,
    help = "let clients trade the API key for short-lived JWTs, as Tinker does (RestClient.whoami reads them); "
      .. "--no-jwt-auth: clients send the key itself" },
  { name = "ready_file", type = "string", help = "write the server's URL here once it serves (for parents)" },
}
rl.script = "tinker"

if opt.session_timeout < 0 then
  rl.args.usage_error(("--session-timeout %g: give seconds >= 0 (0: sessions never expire)"):format(opt.session_timeout))
elseif opt.session_timeout > 0 and opt.session_timeout < 20 then
  rl.log.warn("rlhost tinker: --session-timeout %g: the SDK sends a heartbeat every 10 s, so a live client's "
    .. "session may expire between two of them when one is late", opt.session_timeout)
end
if opt.min_checkpoint_ttl < 1 then
  rl.args.usage_error(("--min-checkpoint-ttl %d: give seconds >= 1"):format(opt.min_checkpoint_ttl))
end
if #opt.base_model == 0 then rl.args.usage_error("--base-model: give at least one model directory to serve") end
for _, dir in ipairs(opt.base_model) do
  local f = io.open(dir .. "/config.json", "r")
  if not f then rl.args.usage_error("--base-model " .. dir .. ": no config.json there (a Hugging Face model directory)") end
  f:close()
end
if opt.host ~= "127.0.0.1" and opt.host ~= "localhost" and opt.host ~= "::1" then
  rl.log.warn("rlhost tinker: binding %s: every client that can reach it and holds the key can train and sample "
    .. "(the key is the only check; put TLS in front across untrusted networks)", opt.host)
end

local home = os.getenv("HOME") or "/tmp"
local cache = home .. "/.cache/rlhost/tinker"
local key_file = opt.api_key_file or (cache .. "/api_key")
local key = require("rl.tinker.keys").load_or_create(key_file)

rl.engine.forward_sigterm()
local srv, err = rl.tinker.serve {
  base_models = opt.base_model, api_keys = { key }, host = opt.host, port = opt.port,
  allow_remote = opt.host ~= "127.0.0.1" and opt.host ~= "localhost" and opt.host ~= "::1",
  checkpoint_dir = opt.checkpoint_dir or cache, lora_alpha = opt.lora_alpha, max_rank = opt.max_rank, poll = opt.poll,
  session_timeout = opt.session_timeout, min_checkpoint_ttl = opt.min_checkpoint_ttl,
  jwt_auth = opt.jwt_auth,
}
if not srv then
  io.stderr:write("rlhost tinker: ", tostring(err), "\n")
  rl.exit(1)
end
if opt.ready_file then
  local tmp = opt.ready_file .. ".tmp"
  local f = assert(io.open(tmp, "w"))
  f:write(srv.url, "\n")
  f:close()
  assert(os.rename(tmp, opt.ready_file))
end
rl.log.info("rlhost tinker: serving %s at %s", table.concat(opt.base_model, ", "), srv.url)
rl.log.info("rlhost tinker: clients: export TINKER_BASE_URL=%s TINKER_API_KEY=$(cat %s)", srv.url, key_file)
local done, e = pcall(function() while true do rl.sleep(3600) end end)
srv:stop()
rl.log.info("rlhost tinker stopped")
if not done and not rl.task.is_cancelled(e) then error(e, 0) end
