-- rl.mathgen.tools: the calculator chats of the tool-using default model. Every trace
-- parses (rl.agent's parser), each tool turn holds the right result of the call before
-- it (checked here by hand, not by the calculator that wrote it), the next turn
-- uses that result and the last one ends on the right answer; the derived tokenizer
-- has Qwen2.5's tool tokens and renders tool turns as rl.mathgen.tools.render does;
-- the SFT sequences are the template's tokens with loss mask 0 exactly on tool turns.
local rl = require "rl"
local mathgen = require "rl.mathgen"
local tools = require "rl.mathgen.tools"
local mtok = require "rl.mathgen.tokenizer"
local warmup = require "rl.mathgen.warmup"

local OPTS = { seed = 5, n = 300, max_number = 100, max_factor = 20 }

local function tool_tokenizer(problems)
  local texts = {}
  for i, p in ipairs(problems) do texts[i] = tools.render(tools.trace(p, i % 2 == 0)) end
  local dir = tmpdir()
  os.execute("mkdir -p " .. dir)
  local tj, tc = mtok.derive(texts, { max_merges = 200, tools = true })
  assert(mtok.save(dir, tj, tc))
  return assert(rl.tokenizer.load(dir))
end

describe("rl.mathgen.tools", function()
  it("works every operation with a calculator call whose result the next turn uses", function()
    for _, p in ipairs(mathgen.dataset(OPTS)) do
      local msgs = tools.trace(p, true)
      eq(msgs[1], { role = "user", content = p.question })
      local n_calls, answer = 0, {}
      for k = 2, #msgs, 2 do
        local a = msgs[k]
        eq(a.role, "assistant")
        answer[#answer + 1] = a.content
        if k < #msgs then
          local calls, problems = rl.agent.toolcall.parse(a.content)
          eq(#calls, 1, a.content)
          eq(#problems, 0)
          eq(calls[1].name, "calculator")
          local expression = calls[1].arguments.expression
          ok(a.content:match("</tool_call>$"), "a call ends the turn: " .. a.content)
          local tool = msgs[k + 1]
          eq(tool.role, "tool")
          local a_, op, b_ = expression:match("^(%d+)([%+%-%*/])(%d+)$")
          local v = ({ ["+"] = a_ + b_, ["-"] = a_ - b_, ["*"] = a_ * b_, ["/"] = a_ / b_ })[op]
          ok(v and v == math.floor(v) and v >= 0, expression)
          eq(tool.content, ("%d"):format(v))
          -- the next turn writes the operation with the result the tool gave
          ok(msgs[k + 2].content:find(expression .. "=$" .. tool.content, 1, true)
            or msgs[k + 2].content:find(expression .. "=" .. tool.content, 1, true), msgs[k + 2].content)
          n_calls = n_calls + 1
        end
      end
      eq(n_calls, p.steps, p.answer)
      ok(msgs[#msgs].content:match("\n#### " .. p.value .. "$") or msgs[#msgs].content:match("^#### " .. p.value .. "$"),
        msgs[#msgs].content)
      eq(rl.rewards.gsm8k.score(table.concat(answer, "\n"), p.answer), 1)
      -- the worked lines, without the calls, are rl.mathgen's answer
      eq((table.concat(answer, "\n"):gsub("<tool_call>.-</tool_call>\n?", ""):gsub("\n+", "\n")), p.answer)
    end
  end)

  it("leaves a chat without the calculator as one assistant turn", function()
    local p = mathgen.dataset(OPTS)[1]
    eq(tools.trace(p, false), { { role = "user", content = p.question }, { role = "assistant", content = p.answer } })
  end)

  it("writes calls as Qwen2.5 does, which rl.agent's parser reads", function()
    local call = tools.call_text("17*12")
    eq(call, '<tool_call>\n{"name": "calculator", "arguments": {"expression": "17*12"}}\n</tool_call>')
    local calls, problems = rl.agent.toolcall.parse(call)
    eq(#problems, 0)
    eq(calls[1].name, "calculator")
    eq(calls[1].arguments, { expression = "17*12" })
  end)

  it("derives a tokenizer with the tool tokens whose template renders tool turns", function()
    local problems = mathgen.dataset(OPTS)
    local tok = tool_tokenizer(problems)
    for _, t in ipairs(mtok.TOOL_TOKENS) do
      local id = tok:token_to_id(t)
      ok(id, t)
      eq(tok:encode(t, { add_special_tokens = false }), { id })
    end
    -- not special: decoding for the reward keeps them
    local call = tools.call_text("5*6")
    eq(tok:decode(tok:encode(call, { add_special_tokens = false }), { skip_special_tokens = true }), call)
    for i = 1, 40 do
      local msgs = tools.trace(problems[i], true)
      eq(tok:apply_chat_template(msgs), tools.render(msgs))
    end
  end)

  it("encodes a chat as the template's tokens with loss mask 0 exactly on the tool turns", function()
    local problems = mathgen.dataset(OPTS)
    local tok = tool_tokenizer(problems)
    local eos = tok.eos_token_ids[1]
    for i = 1, 60 do
      local msgs = tools.trace(problems[i], i % 3 ~= 0)
      local ids, n, mask = warmup.encode_chat(tok, msgs)
      -- segment by segment equals the whole rendering tokenized at once (minus its last "\n")
      local full = tok:encode(tok:apply_chat_template(msgs), { add_special_tokens = false })
      eq(#full, #ids + 1)
      for k = 1, #ids do eq(ids[k], full[k]) end
      eq(#mask, n)
      -- masked tokens decode to exactly the tool turns' text, trained ones to the assistant's
      local p0 = #ids - n
      local trained, masked = {}, {}
      for k = 1, n do
        local list = mask[k] == 1 and trained or masked
        list[#list + 1] = ids[p0 + k]
      end
      local want_masked, want_trained = {}, {}
      for k = 2, #msgs do
        if msgs[k].role == "tool" then
          want_masked[#want_masked + 1] = "\n" .. tools.render({ msgs[k] }) .. "<|im_start|>assistant\n"
        else
          want_trained[#want_trained + 1] = msgs[k].content .. "<|im_end|>"
        end
      end
      eq(tok:decode(masked), table.concat(want_masked))
      eq(tok:decode(trained), table.concat(want_trained))
      eq(ids[#ids], eos)
      eq(mask[n], 1)
    end
  end)

  it("trains on the tool turns' ids that rl.agent appends in the rollout", function()
    local tok = tool_tokenizer(mathgen.dataset(OPTS))
    local eos = tok.eos_token_ids[1]
    for _, result in ipairs { "82", "1776", "3.5", "error: division by zero" } do
      local ids = rl.agent.trajectory.observation_ids(tok, { { role = "tool", content = result } }, eos)
      eq(ids, warmup.observation_ids(tok, result), result)
    end
  end)
end)
