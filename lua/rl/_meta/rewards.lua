---@meta
-- LuaLS type stubs for rl.rewards (lua/rl/rewards/). See docs/lua-api.md ("rl.rewards").

---@class rl.rewards.Sample
---@field response string
---@field label any
---@field prompt? any
---@field reward? number|table|nil
---@field group_index? integer
---@field metadata? table

---@alias rl.rewards.Fn fun(sample: rl.rewards.Sample): number|table|boolean|nil

---@class rl.rewards
---@field gsm8k rl.rewards.gsm8k
---@field math rl.rewards.math
---@field answer rl.rewards.answer
rl.rewards = {}

--- A built-in reward by name: gsm8k, math, remote, random; "boxed_<name>" grades the last \boxed{} only.
---@param name string
---@param opts? table gsm8k: {extract="auto"|"boxed"|"hash"|"last_number"}; remote: {url, timeout?, retries?, max_backoff?, headers?}
---@return rl.rewards.Fn
function rl.rewards.get(name, opts) end

--- Calls fn(sample) protected and time-limited.
---@param fn rl.rewards.Fn
---@param sample rl.rewards.Sample
---@param opts? {timeout?: number}
---@return number|table|nil reward
---@return "ok"|"skip"|"error"|"timeout" outcome
---@return string|nil err message with the Lua traceback, or the timeout
function rl.rewards.evaluate(fn, sample, opts) end

--- Group-normalised rewards by group_index (nil for skipped samples), and the raw values.
---@param samples rl.rewards.Sample[]
---@param opts? {estimator?: string|fun(samples: table, raw: table): table, normalize_group?: fun(rewards: number[], estimator: string): number[], std?: boolean, eps?: number, reward_key?: string}
---@return (number|nil)[] normalized
---@return (number|nil)[] raw
function rl.rewards.normalize(samples, opts) end

--- One group's normalised rewards (the library's per-group default): grpo/gspo/cispo
--- reward − mean over (unbiased std + eps), reinforce_plus_plus_baseline reward − mean,
--- reinforce_plus_plus raw.
---@param rewards number[]
---@param estimator? string default "grpo"
---@param opts? {std?: boolean, eps?: number}
---@return number[]
function rl.rewards.normalize_group(rewards, estimator, opts) end

--- The scalar reward of a sample (reward, or reward[reward_key]).
---@return number|nil
function rl.rewards.value(sample, reward_key) end

---@class rl.rewards.gsm8k
local gsm8k = {}
---@return integer score 1 or 0
---@return {pred: number|nil, pred_text: string|nil, target: number}
function gsm8k.score(response, label, opts) end
---@return number|nil, string|nil
function gsm8k.target(label) end
---@return number|nil pred, string|nil raw
function gsm8k.prediction(response, extract) end

---@class rl.rewards.math
local math_ = {}
---@return integer score 1 or 0
---@return {pred: string|nil, target: string|nil}
function math_.score(response, label) end
---@return boolean
function math_.equal(given, truth) end
---@return string
function math_.normalize(s) end

---@class rl.rewards.answer
local answer = {}
---@return string|nil
function answer.last_boxed(s) end
---@return string|nil
function answer.after_hashes(s) end
---@return string|nil
function answer.last_number(s) end
---@return number|nil
function answer.number(s) end
