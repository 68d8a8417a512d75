--- rl.mathgen.tools: rl.mathgen's problems worked with a calculator tool, as
--- multi-turn chats in Qwen2.5's tool-call syntax (the SFT data of the tool-using
--- default model, docs/recipes.md).
--
--   local msgs = rl.mathgen.tools.trace(p, true)     -- p from rl.mathgen.problem; true: use the calculator
--   -- { {role="user", content=question},
--   --   {role="assistant", content='<tool_call>\n{"name": "calculator", "arguments": {"expression": "17*12"}}\n</tool_call>'},
--   --   {role="tool", content="204"},
--   --   {role="assistant", content="The pens cost 17*12=$204.\n<tool_call>...</tool_call>"}, ...,
--   --   {role="assistant", content="He spends 204+31=$235.\n#### 235"} }
--
-- Each worked line of a problem ("The pens cost 17*12=$204.") holds one operation.
-- With the calculator, the assistant ends its turn with a call for that operation,
-- the tool turn answers with the result, and the next assistant turn writes the line
-- (copying the result) and calls for the next one; the last turn ends with "#### N".
-- Without it, the whole worked answer is one assistant turn, as rl.mathgen writes it.
-- The results are rl.agent's calculator's (rl.agent.calc), which answers the calls in
-- the rollout.
local json = require "rl.json"
local calc = require "rl.agent.calc"

local M = {}

M.TOOL = "calculator"

-- "a<op>b=[$]c" inside a worked line.
local OPERATION = "(%d+)([%+%-%*/])(%d+)=%$?(%d+)"

--- The operation of a worked line: "a<op>b" and its result, or nil.
function M.operation(line)
  local a, op, b, c = line:match(OPERATION)
  if not a then return nil end
  return a .. op .. b, tonumber(c)
end

--- The text of one call: Qwen2.5's <tool_call> block (JSON as Python's json.dumps writes it).
function M.call_text(expression)
  return '<tool_call>\n{"name": "' .. M.TOOL .. '", "arguments": {"expression": ' .. json.encode(expression)
    .. '}}\n</tool_call>'
end

--- The chat of problem p (rl.mathgen.problem's), worked with the calculator for every
--- operation when use_tool, else in one turn. A list of {role, content}; tool turns have
--- role "tool" and the result as content.
function M.trace(p, use_tool)
  local msgs = { { role = "user", content = p.question } }
  if not use_tool then
    msgs[2] = { role = "assistant", content = p.answer }
    return msgs
  end
  local lines = {}
  for line in p.answer:gmatch("[^\n]+") do lines[#lines + 1] = line end
  local text = ""   -- the assistant turn so far
  for _, line in ipairs(lines) do
    local expression, result = M.operation(line)
    if expression then
      msgs[#msgs + 1] = { role = "assistant", content = text .. M.call_text(expression) }
      msgs[#msgs + 1] = { role = "tool", content = calc.format(assert(calc.eval(expression))) }
      assert(calc.eval(expression) == result, line)
      text = ""
    end
    text = text .. line .. "\n"
  end
  msgs[#msgs + 1] = { role = "assistant", content = (text:gsub("\n$", "")) }
  return msgs
end

--- The chat as the tool model's template renders it (rl.mathgen.tokenizer's, with tools).
function M.render(msgs)
  local out = {}
  for i, m in ipairs(msgs) do
    out[i] = m.role == "tool" and ("<|im_start|>user\n<tool_response>\n" .. m.content .. "\n</tool_response><|im_end|>\n")
      or ("<|im_start|>" .. m.role .. "\n" .. m.content .. "<|im_end|>\n")
  end
  return table.concat(out)
end

return M
