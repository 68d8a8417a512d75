---@meta
-- LuaLS type stubs for rl.mathgen (lua/rl/mathgen/). See docs/recipes.md ("The default model").

---@class rl.mathgen.Problem
---@field question string
---@field answer string worked lines, then "#### N"
---@field value integer N
---@field steps integer 1, 2 or 3

---@class rl.mathgen.Options
---@field seed? integer
---@field n? integer dataset: problems (default 1000)
---@field train? integer splits: training problems (default 4000)
---@field test? integer splits: held-out problems (default 200)
---@field max_number? integer largest amount (default 10)
---@field max_factor? integer largest count, price or multiplier (default 5)
---@field steps? number[] weights of 1-, 2- and 3-step templates (default {1, 1, 1})

---@class rl.mathgen
---@field DEFAULTS rl.mathgen.Options
rl.mathgen = {}

--- One problem from an rl.pyrandom generator.
---@param r table rl.pyrandom.new(seed)
---@param opts? rl.mathgen.Options
---@return rl.mathgen.Problem
function rl.mathgen.problem(r, opts) end

---@param opts? rl.mathgen.Options
---@return rl.mathgen.Problem[]
function rl.mathgen.dataset(opts) end

--- A training split (seed) and a held-out split (seed + 1, no question of the training split).
---@param opts? rl.mathgen.Options
---@return rl.mathgen.Problem[] train
---@return rl.mathgen.Problem[] test
function rl.mathgen.splits(opts) end

--- GSM8K JSONL: one {"question", "answer"} object per line.
---@return true|nil ok
---@return string? err
function rl.mathgen.write_jsonl(path, problems) end

--- The cached default model directory ($XDG_CACHE_HOME/rlhost/default-math-model-v<N>), made on
--- first use by rl.mathgen.warmup (the code of recipes/sft_warmup.lua): from the shipped weights
--- (models/default-math-model-v<N>, seconds) where they fit, else trained. opts: cache_dir, name,
--- shipped = false (train even so), tools (the tool-using variant, default-math-tools-model-v<N>,
--- trained on rl.mathgen.tools chats) and any sft_warmup option (snake_case) to build something else.
---@param opts? table
---@return string dir
function rl.mathgen.default_model(opts) end

--- The warm-up build behind recipes/sft_warmup.lua (require "rl.mathgen.warmup").
---@class rl.mathgen.warmup
rl.mathgen.warmup = {}

--- p with a wrong final "#### N" line (the first worked line's result, or off by 1 to 3);
--- the warm-up's noisy labels. r is an rl.pyrandom.
---@param p rl.mathgen.Problem
---@return rl.mathgen.Problem
function rl.mathgen.warmup.noisy(p, r) end

--- Share of responses whose final "#### N" is not the result of their last worked line.
---@param texts string[]
---@return number
function rl.mathgen.warmup.final_mismatch_rate(texts) end

--- A chat-formatted tool chat (rl.mathgen.tools.trace) as trained: all ids, the number after
--- the prompt and the loss mask over them (0 on the tool turns).
---@param tok rl.tokenizer.Tokenizer
---@param msgs {role: string, content: string}[]
---@return integer[] ids
---@return integer n
---@return integer[] mask
function rl.mathgen.warmup.encode_chat(tok, msgs) end

--- The shipped weights of a default model: models/<entry> beside lua/ in the rlhost tree
--- (source and installed alike), or nil when that entry is not shipped.
---@param entry string e.g. "default-math-model-v2"
---@return string|nil dir
function rl.mathgen.warmup.shipped_dir(entry) end

--- Builds a model directory (the steps of recipes/sft_warmup.lua) into dir; with shipped (a
--- shipped_dir) the SFT step takes its weights once the derived config and tokenizer equal
--- theirs byte for byte, else trains (only_shipped: fails instead). → the warmup.json report.
---@param opt table warmup options (rl.mathgen.warmup.defaults() overridden)
---@param dir string
---@param shipped? string
---@param only_shipped? boolean
---@return table report
function rl.mathgen.warmup.build(opt, dir, shipped, only_shipped) end

--- Calculator chats of the problems (require "rl.mathgen.tools").
---@class rl.mathgen.tools
---@field TOOL string "calculator"
rl.mathgen.tools = {}

--- Problem p as a chat: with use_tool, every operation is a <tool_call> answered by a
--- "tool" turn and written out by the next assistant turn; else one assistant turn.
---@param p rl.mathgen.Problem
---@param use_tool boolean
---@return {role: string, content: string}[]
function rl.mathgen.tools.trace(p, use_tool) end

--- The chat as the tool model's ChatML template renders it.
---@return string
function rl.mathgen.tools.render(msgs) end

--- Qwen2.5's <tool_call> block calling the calculator on expression.
---@return string
function rl.mathgen.tools.call_text(expression) end
