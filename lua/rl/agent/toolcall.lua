--- rl.agent.toolcall: the model family's tool-call syntax (Qwen2.5 / Qwen3 / Hermes):
---   <tool_call>
---   {"name": "calculator", "arguments": {"expression": "3*4"}}
---   </tool_call>
--- parsed without ever raising: what cannot be a call becomes a problem message for
--- the model (an observation), never an error for the rollout.
--
--   local calls, problems = rl.agent.toolcall.parse(text)
--   -- calls: {{name = "calculator", arguments = {expression = "3*4"}, raw = "..."}}
--   -- problems: {"tool call 2: bad JSON (...)"}
local json = require "rl.json"

-- MAX_TAGS: <tool_call> tags one turn is read for; the rest are one problem (a turn of
-- 100k unclosed tags costs a few of them, not a message each).
local M = { OPEN = "<tool_call>", CLOSE = "</tool_call>", MAX_TAGS = 64 }

-- Linear whatever the text (a pattern such as "%s+$" is quadratic on a long run of blanks).
local function trim(s)
  local i = s:find("%S")
  if not i then return "" end
  local j = #s
  while j > i do
    local b = s:byte(j)
    if b ~= 32 and (b < 9 or b > 13) then break end
    j = j - 1
  end
  return s:sub(i, j)
end


-- One call's JSON text -> call or nil, problem.
local function one(body, k)
  local ok, v, err = pcall(json.decode, body)
  if not ok then v, err = nil, v end
  if v == nil then
    return nil, ("tool call %d: bad JSON (%s); write {\"name\": ..., \"arguments\": {...}}"):format(k,
      tostring(err):gsub("^rl%.json%.decode: ", ""))
  end
  if type(v) ~= "table" or json.is_array(v) then
    return nil, ("tool call %d: a JSON object {\"name\": ..., \"arguments\": {...}} expected"):format(k)
  end
  if type(v.name) ~= "string" or v.name == "" then
    return nil, ("tool call %d: no \"name\" (a string) in the call"):format(k)
  end
  local args = v.arguments
  if args == nil or args == json.null then args = v.parameters end
  if type(args) == "string" then   -- OpenAI's form: the arguments as a JSON string
    local ok2, a = pcall(json.decode, args)
    args = ok2 and a or nil
    if args == nil then return nil, ("tool call %d (%s): \"arguments\" is a string that is not JSON"):format(k, v.name) end
  end
  if args == nil or args == json.null then
    return nil, ("tool call %d (%s): no \"arguments\" object"):format(k, v.name)
  end
  if type(args) ~= "table" or (json.is_array(args) and #args > 0) then
    return nil, ("tool call %d (%s): \"arguments\" must be a JSON object"):format(k, v.name)
  end
  return { name = v.name, arguments = args, raw = body }
end

--- The tool calls of a turn's text: calls (in order) and problems (strings). A text
--- with no <tool_call> gives two empty lists.
function M.parse(text)
  local calls, problems = {}, {}
  if type(text) ~= "string" then return calls, { "tool call: the turn has no text" } end
  local pos, k = 1, 0
  local close_at, close_end = nil, nil   -- the next </tool_call> at or after pos (false: none left)
  local a, b = text:find(M.OPEN, 1, true)
  while a do
    k = k + 1
    if k > M.MAX_TAGS then
      local more = 1
      local from = b + 1
      while true do
        local x, y = text:find(M.OPEN, from, true)
        if not x then break end
        more, from = more + 1, y + 1
      end
      problems[#problems + 1] = ("%d more <tool_call> tags in this turn were not read (at most %d are)")
        :format(more, M.MAX_TAGS)
      break
    end
    if close_at ~= false and (close_at == nil or close_at <= b) then   -- each text position searched once
      close_at, close_end = text:find(M.CLOSE, b + 1, true)
      if not close_at then close_at = false end
    end
    local c, d = close_at or nil, close_end
    local nexto, nexto_end = text:find(M.OPEN, b + 1, true)
    if not c or (nexto and nexto < c) then
      -- unclosed: take what follows up to the next opening (or the end) if it is one JSON object
      local stop = nexto and nexto - 1 or #text
      local body = trim(text:sub(b + 1, stop))
      if body:sub(-10) == "<|im_end|>" then body = trim(body:sub(1, -11)) end
      local call = body ~= "" and one(body, k)
      if call then calls[#calls + 1] = call
      else problems[#problems + 1] = ("tool call %d: <tool_call> without </tool_call>"):format(k) end
      pos = stop + 1
      a, b = nexto, nexto_end
    else
      local call, problem = one(trim(text:sub(b + 1, c - 1)), k)
      if call then calls[#calls + 1] = call else problems[#problems + 1] = problem end
      pos = d + 1
      a, b = text:find(M.OPEN, pos, true)
    end
  end
  return calls, problems
end

--- OpenAI's tool_calls list for calls (arguments as JSON strings), ids "call_<turn>_<k>".
function M.openai(calls, turn)
  local out = json.array()
  for k, c in ipairs(calls) do
    out[k] = { id = ("call_%d_%d"):format(turn or 0, k), type = "function",
               ["function"] = { name = c.name, arguments = json.encode(c.arguments) } }
  end
  return out
end

return M
