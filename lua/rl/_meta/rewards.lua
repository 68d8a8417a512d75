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
---@field deepscaler rl.rewards.deepscaler
---@field dapo rl.rewards.dapo
---@field answer rl.rewards.answer
rl.rewards = {}

--- A built-in reward by slime's rm_type name: math, deepscaler, dapo (a table: use reward_key "score"),
--- remote, random, and gsm8k; "boxed_<name>" grades the last \boxed{} only.
---@param name string
---@param opts? table gsm8k: {extract="auto"|"boxed"|"hash"|"last_number"}; remote: {url, timeout?, retries?, max_backoff?, headers?}
---@return rl.rewards.Fn
function rl.rewards.get(name, opts) end

--- The reward slime's rollout picks per sample: metadata.rm_type's built-in when set, else `default`.
---@param default string|rl.rewards.Fn
---@param opts? table constructor options of the named rewards
---@return rl.rewards.Fn
function rl.rewards.by_rm_type(default, opts) end

--- Calls fn(sample) protected and time-limited (waiting or busy, JIT-compiled loops
--- too: rl.task.run_limited).
---@param fn rl.rewards.Fn
---@param sample rl.rewards.Sample
---@param opts? {timeout?: number}
---@return number|table|nil reward
---@return "ok"|"skip"|"error"|"timeout" outcome
---@return string|nil err message with the Lua traceback, or the timeout's (file:line of fn, where it stopped)
---@return {busy: boolean}|nil info on a timeout: busy when it ran Lua code for the whole limit
function rl.rewards.evaluate(fn, sample, opts) end

--- Group-normalised rewards by group_index (nil for skipped samples), and the raw values.
---@param samples rl.rewards.Sample[]
---@param opts? {estimator?: string|fun(samples: table, raw: table): table, normalize_group?: fun(rewards: number[], estimator: string): number[], std?: boolean, eps?: number, reward_key?: string}
---@return (number|nil)[] normalized
---@return (number|nil)[] raw
function rl.rewards.normalize(samples, opts) end

--- One group's normalised rewards (the library's per-group default): grpo/gspo/cispo
--- reward − mean over (unbiased std + eps), reinforce_plus_plus_baseline reward − mean,
--- reinforce_plus_plus and ppo raw.
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
--- slime's grade_answer_verl: the last \boxed{...} against the label; 1 or 0.
---@param response string
---@param label any
---@return integer score 1 or 0
---@return {pred: string|nil, target: string|nil}
function math_.score(response, label) end
--- Hendrycks match or sympy-grader match.
---@param given string
---@param truth string
---@return boolean
function math_.equal(given, truth) end
---@return boolean
function math_.grade_mathd(given, truth) end
---@return boolean
function math_.grade_sympy(given, truth) end
--- The label as slime reads it (nil when falsy; a boxed label's box).
---@return string|nil
function math_.target(label) end
--- Hendrycks' normalisation.
---@param s string
---@return string
function math_.normalize(s) end

---@class rl.rewards.deepscaler
local deepscaler = {}
--- slime's deepscaler reward: the last \boxed{} after the last </think> (or ###Response); 1 or 0.
---@return integer score 1 or 0
---@return {pred: string|nil, target: string|nil}
function deepscaler.score(response, label) end
--- The graded part of the response, or nil.
---@return string|nil
function deepscaler.solution(response) end

---@class rl.rewards.dapo
local dapo = {}
--- slime's dapo reward: the last "Answer: ..." of the final 300 characters against the integer label.
---@return {score: number, acc: boolean, pred: string}
function dapo.score(response, label) end
--- The Minerva normalisation of a final answer.
---@return string
function dapo.normalize(s) end
--- The label as dapo's integer text; raises when the label is not a number.
---@return string
function dapo.target(label) end

---@class rl.rewards.answer
local answer = {}
---@return string|nil
function answer.last_boxed(s) end
--- The last \boxed{...} as slime's math graders extract it (needs "\boxed{", no \fbox).
---@return string|nil
function answer.slime_boxed(s) end
---@return string|nil
function answer.after_hashes(s) end
---@return string|nil
function answer.last_number(s) end
---@return number|nil
function answer.number(s) end

-- The pieces of slime's graders (require "rl.rewards.<name>").

---@class rl.rewards.hendrycks
local hendrycks = {}
--- Hendrycks' MATH normalisation, as slime's grade_answer_mathd applies it.
---@return string|nil
function hendrycks.normalize(s) end
--- X of a whole-string "\text{X}", else nil.
---@return string|nil
function hendrycks.text_inner(s) end

---@class rl.rewards.mathnorm
local mathnorm = {}
--- The normalisation of slime's sympy grader.
---@return string|nil
function mathnorm.normalize(s) end
---@return string[]
function mathnorm.split_tuple(s) end
---@return boolean
function mathnorm.is_frac(s) end
---@return boolean
function mathnorm.str_is_int(s) end

---@class rl.rewards.expr
local expr = {}
--- Whether "(truth)-(given)", read as sympy reads it, simplifies to 0.
---@param text string
---@return boolean
function expr.zero(text) end

---@class rl.rewards.latex_text
local latex_text = {}
--- LaTeX rendered as text as pylatexenc does for slime (nil where it gives up).
---@return string|nil
function latex_text.convert(s) end

---@class rl.rewards.pytext
local pytext = {}
--- Python's float(s) (Unicode digits, underscores), or nil.
---@return number|nil
function pytext.float(s) end
---@return string
function pytext.strip(s) end
---@return string
function pytext.lower(s) end
---@return string
function pytext.strip_commas(s) end
---@return string[]
function pytext.chars(s) end
---@return integer
function pytext.len(s) end
---@return integer|nil
function pytext.digit(ch) end
---@return boolean
function pytext.isspace(ch) end
---@return boolean
function pytext.isalpha(ch) end
---@return integer
function pytext.width(s, i) end
