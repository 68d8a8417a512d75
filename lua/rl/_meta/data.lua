---@meta
-- LuaLS type stubs for rl.sample, rl.data and rl.pyrandom. See docs/lua-api.md.

---@alias rl.SampleStatus "pending"|"completed"|"truncated"|"aborted"|"failed"

---@class rl.Sample
---@field group_index integer|nil
---@field index integer|nil
---@field rollout_id integer|nil
---@field prompt string|table
---@field tokens integer[] prompt + response token ids
---@field response string
---@field response_length integer
---@field label any
---@field reward number|table|nil nil = skip
---@field loss_mask integer[]|nil
---@field weight_versions string[]
---@field weight_version_spans [integer, string][] rlhost: {first response token (0-based), version} per version the response was sampled under
---@field rollout_log_probs number[]|nil
---@field remove_sample boolean
---@field status rl.SampleStatus
---@field metadata table
---@field session_id string|nil
---@field non_generation_time number
---@field spec_info {spec_accept_token_num: integer, spec_draft_token_num: integer, spec_verify_ct: integer, completion_token_num: integer}
---@field prefix_cache_info {cached_tokens: integer, total_prompt_tokens: integer}
---@field trace table|nil
local Sample = {}
---@param tokens integer[]
---@param logprobs number[]|nil
---@param opts? {trainable?: boolean, meta_info?: table, text?: string}
function Sample:append_response(tokens, logprobs, opts) end
---@return table
function Sample:to_dict() end
---@return rl.Sample
function Sample:clone() end
--- One weight version per response token (false where none is known).
---@return (string|false)[]
function Sample:token_weight_versions() end
---@return integer
function Sample:effective_response_length() end
---@return number
function Sample:prefix_cache_hit_rate() end

---@class rl.sample
rl.sample = {}
---@param fields? table
---@return rl.Sample
function rl.sample.new(fields) end
---@param d table
---@return rl.Sample
function rl.sample.from_dict(d) end

---@class rl.data.Source
---@field path string
---@field skipped integer rows skipped as bad (skip_bad_rows)
---@field dropped integer prompts dropped by max_prompt_len
---@field epoch_id integer
local Source = {}
---@return integer
function Source:size() end
---@param n integer prompts
---@param n_per_prompt? integer samples per prompt (1)
---@return rl.Sample[][]
function Source:get_samples(n, n_per_prompt) end
---@return {sample_offset: integer, epoch_id: integer, sample_group_index: integer, sample_index: integer}
function Source:state() end
function Source:load_state(state) end

---@class rl.data
rl.data = {}
---@param path string .jsonl, .json or .parquet (columns picked by the keys), optionally "path@[start:end]"
---@param opts? {input_key?: string, label_key?: string, metadata_key?: string, tool_key?: string, apply_chat_template?: boolean, tokenizer?: rl.tokenizer.Tokenizer, chat_template_kwargs?: table, max_prompt_len?: integer, shuffle?: boolean, seed?: integer, skip_bad_rows?: boolean}
---@return rl.data.Source
function rl.data.load(path, opts) end

---@class rl.pyrandom.Random
local Random = {}
---@return number
function Random:random() end
---@return integer
function Random:randbelow(n) end
---@return integer
function Random:getrandbits(k) end
---@generic T
---@param list T[]
---@return T[]
function Random:shuffle(list) end

---@class rl.pyrandom
rl.pyrandom = {}
---@param seed integer
---@return rl.pyrandom.Random
function rl.pyrandom.new(seed) end
