---@meta
-- rl.tinker: a self-hosted Tinker API server (docs/tinker.md).

---@class rl.tinker
rl.tinker = {}

--- Seconds without a heartbeat before a session expires (serve's default session_timeout).
rl.tinker.SESSION_TIMEOUT = 60

---@class rl.tinker.ServeOpts
---@field base_models string[]|table<string, string> model directories (a client names each by its path), or name → directory
---@field api_keys string[] the keys clients send as X-API-Key (each "tml-" + at least 8 characters)
---@field checkpoint_dir? string where tinker:// checkpoints live (default ~/.cache/rlhost/tinker)
---@field host? string default "127.0.0.1"
---@field port? integer default 0: a free port
---@field allow_remote? boolean allow a non-loopback host (the key is then the only check)
---@field poll? number seconds a retrieve_future is held before try_again (default 20)
---@field lora_alpha? number every adapter's alpha (default 32; scale alpha / rank)
---@field max_rank? integer largest LoRA rank a client may ask for (default 128)
---@field session_timeout? number seconds without a heartbeat before a session expires and its training clients and samplers are released (default rl.tinker.SESSION_TIMEOUT = 60; 0: never; the SDK beats every 10 s)
---@field min_checkpoint_ttl? integer shortest ttl_seconds a client may set on a checkpoint (default 3600, Tinker's 1 hour)
---@field jwt_auth? boolean let clients trade the API key for short-lived JWTs (rl.tinker.tokens; RestClient.whoami reads them); default true
---@field token_lifetime? number seconds such a JWT lives (default 3600)
---@field engine? table rl.engine.start options for the samplers (over {model, mode = "thread", serve = false})

---@class rl.tinker.Server
---@field url string e.g. "http://127.0.0.1:8000"
local Server = {}
--- Stops serving and stops the sampler engines.
function Server:stop() end

--- Starts the server; nil, err when the port cannot be bound. Raises on bad options.
---@param opts rl.tinker.ServeOpts
---@return rl.tinker.Server|nil server
---@return string|nil err
function rl.tinker.serve(opts) end
