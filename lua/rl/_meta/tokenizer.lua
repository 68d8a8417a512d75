---@meta
-- LuaLS type stubs for rl.tokenizer (lua/rl/tokenizer.lua over _core.tokenizer).
-- See docs/model.md ("Tokenizer").

---@class rl.tokenizer
rl.tokenizer = {}

---@class rl.tokenizer.Tokenizer
---@field vocab_size integer highest id + 1 (model vocabulary plus added tokens; not the model's padded embedding size)
---@field bos_token_id integer|nil tokenizer_config.json bos_token (nil for Qwen)
---@field eos_token_ids integer[] tokenizer_config.json eos_token, plus config.json / generation_config.json eos_token_id
---@field pad_token_id integer|nil tokenizer_config.json pad_token
---@field source string the tokenizer.json path
---@field has_chat_template boolean tokenizer_config.json has a chat_template
local Tokenizer = {}

---@class rl.tokenizer.EncodeOptions
---@field add_special_tokens? boolean add the post-processor's tokens (BOS for Llama; none for Qwen); default true

---@class rl.tokenizer.DecodeOptions
---@field skip_special_tokens? boolean drop special tokens (added tokens with special=true); default false

---@class rl.tokenizer.ChatTemplateOptions
---@field add_generation_prompt? boolean end with the assistant header; default false
---@field tokenize? boolean return ids (encoded without special tokens) instead of text; default false
---@field enable_thinking? boolean Qwen3: false appends an empty <think></think> block
---@field tools? table[] tool schemas, for templates that render them
---@field [string] any any other template variable

--- Ids of `text` (added tokens like <|im_start|> are recognised in the text).
---@param text string
---@param opts? rl.tokenizer.EncodeOptions
---@return integer[]
function Tokenizer:encode(text, opts) end

--- Text of `ids`; unknown ids are skipped; invalid UTF-8 becomes U+FFFD.
---@param ids integer[]
---@param opts? rl.tokenizer.DecodeOptions
---@return string
function Tokenizer:decode(ids, opts) end

--- Renders tokenizer_config.json's chat template (as transformers does) for
--- `messages` ({role=, content=, ...} tables). A missing template, or one that
--- raises (raise_exception), returns nil, err.
---@param messages table[]
---@param opts? rl.tokenizer.ChatTemplateOptions
---@return string|integer[]|nil text_or_ids
---@return string|nil err
function Tokenizer:apply_chat_template(messages, opts) end

---@param token string
---@return integer|nil
function Tokenizer:token_to_id(token) end

---@param id integer
---@return string|nil
function Tokenizer:id_to_token(id) end

---@class rl.tokenizer.Decoder
local Decoder = {}

--- Feeds one id; returns the text that is now safe to show (possibly "").
---@param id integer
---@return string
function Decoder:push(id) end

--- Returns whatever was held back (an incomplete character at the end shows as U+FFFD).
---@return string
function Decoder:finish() end

--- A streaming decoder: the concatenation of push() results and finish() equals
--- decode(ids), and no piece ever ends inside a UTF-8 character.
---@param opts? rl.tokenizer.DecodeOptions
---@return rl.tokenizer.Decoder
function Tokenizer:decoder(opts) end

--- Loads a model directory (tokenizer.json + optional tokenizer_config.json,
--- config.json, generation_config.json) or a tokenizer.json file.
---@param path string
---@return rl.tokenizer.Tokenizer|nil tok
---@return string|nil err
function rl.tokenizer.load(path) end
