---@meta
-- LuaLS type stubs for rl.agent (lua/rl/agent/). See docs/agentic.md.

---@class rl.agent.Options
---@field env table an environment: reset(self, sample) -> observation; step(self, action) -> observation, reward|nil, done; or new(sample) -> one
---@field max_turns? integer (8)
---@field max_total_tokens? integer prompt + response tokens (prompt + rollout_max_response_len)
---@field max_turn_tokens? integer tokens per turn (rollout_max_response_len)
---@field observation_role? string role of string observations ("tool")
---@field reward_reduce? "last"|"sum"
---@field template_opts? table extra apply_chat_template options (tools, ...)
---@field tokenizer? rl.tokenizer.Tokenizer default: the rollout's
---@field on_turn_length? "end"|"continue" a turn cut at max_turn_tokens ends the trajectory ("end") or goes to the env

---@class rl.agent.Action
---@field text string the turn's text (decoded for the environment; the ids stay as generated)
---@field ids integer[] the turn's output ids
---@field turn integer 1-based
---@field finish_reason string
---@field sample table
---@field record table the turn's record in sample.metadata.trajectory.turns

---@class rl.agent.Agent
local Agent = {}
---@return table sample
function Agent:generate(ro, sample, params, evaluation) end

---@class rl.agent.ToolSpec
---@field name string
---@field description? string
---@field parameters? table JSON schema of the arguments object
---@field fn fun(args: table, ctx: table): any, string?
---@field timeout? number seconds (5)

---@class rl.agent.Registry
local Registry = {}
---@param spec rl.agent.ToolSpec
---@return rl.agent.Registry
function Registry:add(spec) end
---@return string content
---@return "ok"|"error"|"timeout"|"unknown_tool"|"bad_arguments" outcome
function Registry:call(call, ctx, trace_target) end
---@return table[] OpenAI tool schemas
function Registry:schemas() end
---@return string[]
function Registry:names() end

---@class rl.agent
rl.agent = {}
---@param opts rl.agent.Options
---@return rl.agent.Agent
function rl.agent.new(opts) end
---@param opts rl.agent.Options|rl.agent.Agent
---@return fun(ro: table, sample: table, params: table, evaluation?: boolean): table
function rl.agent.generate_fn(opts) end
---@param opts {tools: rl.agent.Registry, max_calls_per_turn?: integer, reward?: fun(sample: table, action: rl.agent.Action): any}
---@return table env
function rl.agent.tool_env(opts) end
---@param name string a module on package.path
---@return table env
function rl.agent.watch_env(name) end
---@param opts {url: string, timeout?: number, retries?: integer, headers?: table<string, string>, max_response?: integer}
---@return table env
function rl.agent.http_env(opts) end

rl.agent.tools = {}
---@param tools? rl.agent.ToolSpec[]
---@return rl.agent.Registry
function rl.agent.tools.registry(tools) end
---@return rl.agent.ToolSpec
function rl.agent.tools.calculator(opts) end
---@return rl.agent.ToolSpec
function rl.agent.tools.lua_check(opts) end
---@return rl.agent.ToolSpec
function rl.agent.tools.json_check(opts) end
---@return boolean ok
---@return any value_or_error
---@return "ok"|"error"|"timeout" outcome
function rl.agent.tools.bounded(limit, fn, ...) end

rl.agent.toolcall = {}
---@return {name: string, arguments: table, raw: string}[] calls
---@return string[] problems
function rl.agent.toolcall.parse(text) end
---@return table[] OpenAI tool_calls
function rl.agent.toolcall.openai(calls, turn) end

rl.agent.calc = {}
---@return number|nil value
---@return string|nil err
function rl.agent.calc.eval(expression) end
---@return string
function rl.agent.calc.format(value) end

rl.agent.trajectory = {}
---@return table record sample.metadata.trajectory
function rl.agent.trajectory.begin(sample) end
---@return table|nil
function rl.agent.trajectory.of(sample) end
---@return table turn
function rl.agent.trajectory.append_output(sample, ids, logprobs, meta, text) end
---@return table|nil turn
function rl.agent.trajectory.close_output(sample) end
---@return integer[]|nil ids
---@return string text_or_err
function rl.agent.trajectory.observation_ids(tok, messages, last_id, template_opts) end
function rl.agent.trajectory.append_observation(sample, ids, messages, text) end
function rl.agent.trajectory.finish(sample, reason) end
---@return boolean ok
---@return string|nil why
function rl.agent.trajectory.check(sample, opts) end
---@return (string|false)[]
function rl.agent.trajectory.token_weight_versions(sample) end

rl.agent.metrics = {}
---@return table<string, number>
function rl.agent.metrics.from_samples(samples) end
