--- rl.agent.tools: a registry of tools (Lua functions with a JSON-schema signature
--- and a time limit) and the built-in examples.
--
--   local reg = rl.agent.tools.registry { rl.agent.tools.calculator(), rl.agent.tools.lua_check() }
--   reg:add { name = "lookup", description = "...", parameters = { type = "object",
--             properties = { key = { type = "string" } }, required = { "key" } },
--             fn = function(args, ctx) return db[args.key] or nil, "no such key" end, timeout = 2 }
--   local content, outcome = reg:call { name = "calculator", arguments = { expression = "3*4" } }
--   --> "12", "ok"
--   tok:apply_chat_template(messages, { tools = reg:schemas(), add_generation_prompt = true })
--
-- Outcomes: ok, error (the function raised, or returned nil, err), timeout,
-- unknown_tool, bad_arguments. The time limit holds whatever the tool runs: a tool
-- that waits is cancelled, busy Lua code (JIT-compiled too) is interrupted by the host
-- (rl.task.run_limited). Every outcome but ok comes with an error text meant
-- for the model (an observation); reg:call never raises for what the model wrote.
local json = require "rl.json"
local task = require "rl.task"
local trace = require "rl.trace"

local M = { DEFAULT_TIMEOUT = 5 }
local Registry = {}
Registry.__index = Registry
M.Registry = Registry

local JSON_TYPES = {
  string = function(v) return type(v) == "string" end,
  number = function(v) return type(v) == "number" end,
  integer = function(v) return type(v) == "number" and v == math.floor(v) end,
  boolean = function(v) return type(v) == "boolean" end,
  object = function(v) return type(v) == "table" and not (json.is_array(v) and #v > 0) end,
  array = function(v) return type(v) == "table" and (json.is_array(v) or next(v) == nil) end,
}

local function check_spec(spec, where)
  if type(spec) ~= "table" then error(where .. ": bad argument 'tool' (table expected, got " .. type(spec) .. ")", 3) end
  if type(spec.name) ~= "string" or not spec.name:match("^[%w_%-%.]+$") then
    error(where .. ": bad argument 'tool.name' (a name of letters, digits, _ - . expected, got " .. tostring(spec.name) .. ")", 3)
  end
  if type(spec.fn) ~= "function" then
    error(where .. ": bad argument 'tool.fn' (function expected, got " .. type(spec.fn) .. ") for tool '" .. spec.name .. "'", 3)
  end
  if spec.timeout ~= nil and (type(spec.timeout) ~= "number" or spec.timeout <= 0) then
    error(where .. ": bad argument 'tool.timeout' (seconds > 0 expected) for tool '" .. spec.name .. "'", 3)
  end
  if spec.parameters ~= nil and type(spec.parameters) ~= "table" then
    error(where .. ": bad argument 'tool.parameters' (a JSON schema table expected) for tool '" .. spec.name .. "'", 3)
  end
end

--- A registry holding `tools` (a list of tool specs; more with reg:add).
function M.registry(tools)
  local self = setmetatable({ tools = {}, order = {} }, Registry)
  for _, t in ipairs(tools or {}) do self:add(t) end
  return self
end

--- Adds a tool: {name, description, parameters (JSON schema), fn(args, ctx) -> result
--- | nil, err, timeout (seconds, default 5)}. A result that is not a string is JSON-encoded.
function Registry:add(spec)
  check_spec(spec, "rl.agent.tools.Registry:add")
  if not self.tools[spec.name] then self.order[#self.order + 1] = spec.name end
  self.tools[spec.name] = spec
  return self
end

--- The names of the tools, in the order added.
function Registry:names()
  local out = {}
  for i, n in ipairs(self.order) do out[i] = n end
  return out
end

--- The tools in OpenAI's form ({type = "function", function = {name, description,
--- parameters}}), for apply_chat_template's `tools` and HTTP environments.
function Registry:schemas()
  local out = json.array()
  for _, n in ipairs(self.order) do
    local t = self.tools[n]
    out[#out + 1] = { type = "function", ["function"] = { name = t.name, description = t.description or "",
      parameters = t.parameters or { type = "object", properties = {} } } }
  end
  return out
end

-- The problem with args against the schema's required keys and property types, or nil.
local function check_args(schema, args)
  if type(schema) ~= "table" then return nil end
  for _, key in ipairs(schema.required or {}) do
    if args[key] == nil or args[key] == json.null then return ("missing argument \"%s\""):format(key) end
  end
  for key, prop in pairs(schema.properties or {}) do
    local v = args[key]
    if v ~= nil and v ~= json.null and type(prop) == "table" and prop.type then
      local is = JSON_TYPES[prop.type]
      if is and not is(v) then return ("argument \"%s\" must be a %s"):format(key, prop.type) end
    end
  end
  if schema.additionalProperties == false then
    for key in pairs(args) do
      if not (schema.properties or {})[key] then return ("unknown argument \"%s\""):format(tostring(key)) end
    end
  end
end

--- Calls fn(...) with a time limit that holds whatever it runs: waiting code is
--- cancelled, busy Lua code (interpreted or JIT-compiled) is interrupted by the host
--- (rl.task.run_limited). Returns ok, value-or-error, outcome ("ok", "error",
--- "timeout"); errors are the bare message (it goes back to the model).
function M.bounded(limit, fn, ...)
  local ok, r1, r2, raw = task.run_limited("tool", limit, fn, ...)
  if ok then return true, r1, "ok", r2 end
  if r2 == "timeout" then return false, ("timed out after %g s"):format(limit), "timeout" end
  return false, tostring(raw), "error"
end

--- Runs one parsed call ({name, arguments}). Returns content (a string for the model)
--- and outcome (ok, error, timeout, unknown_tool, bad_arguments). ctx is passed to the
--- tool (the sample, the turn). A trace target (a sample) gets a tool_call span.
function Registry:call(call, ctx, trace_target)
  local function run(span)
    local t = self.tools[call.name]
    local content, outcome
    if not t then
      content, outcome = ("unknown tool \"%s\"; the tools are: %s"):format(tostring(call.name),
        table.concat(self.order, ", ")), "unknown_tool"
    else
      local problem = check_args(t.parameters, call.arguments or {})
      if problem then
        content, outcome = ("%s: %s"):format(t.name, problem), "bad_arguments"
      else
        local limit = t.timeout or M.DEFAULT_TIMEOUT
        local ok, v, kind, err = M.bounded(limit, t.fn, call.arguments, ctx or {})
        if not ok then
          content, outcome = ("%s: %s"):format(t.name, kind == "timeout" and v or ("error: " .. tostring(v):match("^[^\n]*"))), kind
        elseif v == nil then
          content, outcome = ("%s: error: %s"):format(t.name, tostring(err or "no result")), "error"
        else
          content, outcome = type(v) == "string" and v or json.encode(v), "ok"
        end
      end
    end
    if span then
      span:set("outcome", outcome)
      if outcome ~= "ok" then span:set("error_message", content) end
    end
    return content, outcome
  end
  if trace_target then return trace.span(trace_target, "tool_call", { tool = tostring(call.name) }, run) end
  return run()
end

-- ---- built-in tools ---------------------------------------------------------------------

--- The calculator: {expression} -> its value (rl.agent.calc; never `load`).
function M.calculator(opts)
  opts = opts or {}
  local calc = require "rl.agent.calc"
  return { name = opts.name or "calculator", timeout = opts.timeout or 1,
    description = "Evaluate an arithmetic expression (+ - * / // % ^ and parentheses) and return the number.",
    parameters = { type = "object", properties = { expression = { type = "string",
      description = "the expression, e.g. 3*(4+2)" } }, required = { "expression" } },
    fn = function(args)
      local v, err = calc.eval(args.expression)
      if v == nil then return nil, err end
      return calc.format(v)
    end }
end

--- The Lua checker: {code} -> "ok" or the compile error. The snippet is compiled as
--- text only (no bytecode) in an empty environment and never run.
function M.lua_check(opts)
  opts = opts or {}
  local max = opts.max_length or 20000
  return { name = opts.name or "lua_check", timeout = opts.timeout or 1,
    description = "Check that a Lua snippet compiles (it is not run). Returns ok or the syntax error with its line.",
    parameters = { type = "object", properties = { code = { type = "string" } }, required = { "code" } },
    fn = function(args)
      if #args.code > max then return nil, ("code longer than %d characters"):format(max) end
      local f, err = load(args.code, "=snippet", "t", {})
      if f then return "ok" end
      return "syntax error: " .. tostring(err):gsub("^snippet:", "line ")
    end }
end

--- The JSON checker: {text} -> "ok" or where the text stops being JSON.
function M.json_check(opts)
  opts = opts or {}
  return { name = opts.name or "json_check", timeout = opts.timeout or 1,
    description = "Check that a text is valid JSON. Returns ok or where it breaks.",
    parameters = { type = "object", properties = { text = { type = "string" } }, required = { "text" } },
    fn = function(args)
      local ok, v, err = pcall(json.decode, args.text)
      if ok and (v ~= nil or args.text:match("^%s*null%s*$")) then return "ok" end
      return "invalid JSON: " .. tostring(ok and err or v):gsub("^rl%.json%.decode: ", "")
    end }
end

return M
