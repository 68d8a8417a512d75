--- rl.tokenizer: Hugging Face tokenizer.json tokenizers (Qwen2/Qwen3, Llama, ...) in C++.
--
--   local tok = assert(rl.tokenizer.load("/models/Qwen3-0.6B"))
--   local ids = tok:encode("Hello world")                      -- {9707, 1879}
--   print(tok:decode(ids))                                      -- "Hello world"
--   local prompt = tok:apply_chat_template({ { role = "user", content = "Hi" } },
--                                          { add_generation_prompt = true, enable_thinking = false })
--   local dec = tok:decoder { skip_special_tokens = true }     -- streaming: never splits a character
--   for _, id in ipairs(ids) do io.write(dec:push(id)) end; io.write(dec:finish())
--
-- Token ids are the tokenizer's own (0-based) in plain arrays. Runtime failures
-- (missing/corrupt files, a template that raises) return nil, err; misuse raises.
-- See docs/model.md ("Tokenizer") and lua/rl/_meta/tokenizer.lua.
local core = require "rl._core"
local json = require "rl.json"

local ctok = core.tokenizer
local M = {}

local Tokenizer = {}
Tokenizer.__index = Tokenizer

local function check_opts(opts, fname, argn)
  if opts ~= nil and type(opts) ~= "table" then
    error(("%s: bad argument #%d 'opts' (table expected, got %s)"):format(fname, argn, type(opts)), 3)
  end
  return opts or {}
end

local function opt_bool(opts, key, default, fname)
  local v = opts[key]
  if v == nil then return default end
  if type(v) ~= "boolean" then
    error(("%s: bad argument 'opts.%s' (boolean expected, got %s)"):format(fname, key, type(v)), 3)
  end
  return v
end

--- Ids of `text`; opts.add_special_tokens (default true) adds what the
--- post-processor adds (BOS for Llama, nothing for Qwen).
function Tokenizer:encode(text, opts)
  if type(text) ~= "string" then
    error("rl.tokenizer.Tokenizer:encode: bad argument #1 'text' (string expected, got " .. type(text) .. ")", 2)
  end
  opts = check_opts(opts, "rl.tokenizer.Tokenizer:encode", 2)
  return self._h:encode(text, opt_bool(opts, "add_special_tokens", true, "rl.tokenizer.Tokenizer:encode"))
end

--- Text of `ids`; opts.skip_special_tokens (default false) drops special tokens.
function Tokenizer:decode(ids, opts)
  opts = check_opts(opts, "rl.tokenizer.Tokenizer:decode", 2)
  return self._h:decode(ids, opt_bool(opts, "skip_special_tokens", false, "rl.tokenizer.Tokenizer:decode"))
end

--- Renders tokenizer_config.json's chat template for `messages`. opts: add_generation_prompt
--- (default false), tokenize (default false: return the text; true: its ids, encoded without
--- special tokens), tools, enable_thinking and any other template variable.
function Tokenizer:apply_chat_template(messages, opts)
  if type(messages) ~= "table" then
    error("rl.tokenizer.Tokenizer:apply_chat_template: bad argument #1 'messages' (table expected, got " .. type(messages)
      .. ")", 2)
  end
  opts = check_opts(opts, "rl.tokenizer.Tokenizer:apply_chat_template", 2)
  local tokenize = opt_bool(opts, "tokenize", false, "rl.tokenizer.Tokenizer:apply_chat_template")
  local kwargs = {}
  for k, v in pairs(opts) do
    if k ~= "tokenize" then kwargs[k] = v end
  end
  kwargs.add_generation_prompt = opt_bool(opts, "add_generation_prompt", false, "rl.tokenizer.Tokenizer:apply_chat_template")
  -- an empty table encodes as {}: send [] for no messages (the caller's table is left alone)
  local messages_json = next(messages) == nil and "[]" or json.encode(messages)
  local text, err = self._h:apply_chat_template(messages_json, json.encode(kwargs))
  if not text then return nil, err end
  if tokenize then return self._h:encode(text, false) end
  return text
end

--- The id of a token string (model vocabulary or added token), or nil.
function Tokenizer:token_to_id(token) return self._h:token_to_id(token) end

--- The token string of an id, or nil.
function Tokenizer:id_to_token(id) return self._h:id_to_token(id) end

--- A streaming decoder: dec:push(id) returns the text that is safe to show now (never a
--- partial UTF-8 character), dec:finish() whatever is held back.
function Tokenizer:decoder(opts)
  opts = check_opts(opts, "rl.tokenizer.Tokenizer:decoder", 1)
  return self._h:decoder(opt_bool(opts, "skip_special_tokens", false, "rl.tokenizer.Tokenizer:decoder"))
end

function Tokenizer:__tostring()
  return ("rl.tokenizer(%s, %d tokens)"):format(self.source, self.vocab_size)
end

--- Loads a model directory (tokenizer.json + tokenizer_config.json) or a tokenizer.json.
---@return rl.tokenizer.Tokenizer|nil tok
---@return string|nil err
function M.load(path)
  if type(path) ~= "string" then
    error("rl.tokenizer.load: bad argument #1 'path' (string expected, got " .. type(path) .. ")", 2)
  end
  local h, err = ctok.load(path)
  if not h then return nil, err end
  local info = h:info()
  return setmetatable({
    _h = h,
    vocab_size = info.vocab_size,
    bos_token_id = info.bos_token_id,
    eos_token_ids = info.eos_token_ids,
    pad_token_id = info.pad_token_id,
    source = info.source,
    has_chat_template = info.has_chat_template,
  }, Tokenizer)
end

return M
