-- rl.agent without an engine: Qwen tool-call parsing, the calculator and checkers, tool
-- time limits, observation turns rendered by the real Qwen2.5 chat template, the token
-- buffer keeping ids a decode->re-encode would change, the HTTP environment adapter
-- against a real Python server, hot-reloaded environment modules, the metrics.
local rl = require "rl"
local T = require "rl.agent.trajectory"
local tools = require "rl.agent.tools"
local toolcall = require "rl.agent.toolcall"
local calc = require "rl.agent.calc"

local QWEN25 = test_data("tokenizers/qwen/qwen2.5")
local HERE = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."

describe("rl.agent.toolcall", function()
  it("parses Qwen's <tool_call> JSON, one or several per turn", function()
    local calls, problems = toolcall.parse('I will compute.\n<tool_call>\n{"name": "calculator", "arguments": '
      .. '{"expression": "3*4"}}\n</tool_call><|im_end|>')
    eq(#problems, 0)
    eq(#calls, 1)
    eq(calls[1].name, "calculator")
    eq(calls[1].arguments.expression, "3*4")
    calls = toolcall.parse('<tool_call>{"name":"a","arguments":{}}</tool_call><tool_call>{"name":"b","arguments":'
      .. '"{\\"x\\": 2}"}</tool_call>')
    eq(#calls, 2)
    eq(calls[2].arguments.x, 2)   -- OpenAI's arguments-as-a-string form
    eq(#toolcall.parse("no call here"), 0)
  end)
  it("turns malformed calls into problems, never errors", function()
    local cases = {
      { '<tool_call>{"name": "calculator", "arguments": {"expression": "3*4"}</tool_call>', "bad JSON" },
      { '<tool_call>{"arguments": {}}</tool_call>', 'no "name"' },
      { '<tool_call>{"name": "calculator"}</tool_call>', 'no "arguments"' },
      { '<tool_call>{"name": "calculator", "arguments": [1, 2]}</tool_call>', "must be a JSON object" },
      { '<tool_call>[1]</tool_call>', "JSON object" },
      { '<tool_call>{"name": "calculator", "arguments": "not json"}</tool_call>', "not JSON" },
      { '<tool_call>{"name": "x"', "without </tool_call>" },
      { '<tool_call></tool_call>', "bad JSON" },
    }
    for _, c in ipairs(cases) do
      local calls, problems = toolcall.parse(c[1])
      eq(#calls, 0, c[1])
      eq(#problems, 1, c[1])
      ok(problems[1]:find(c[2], 1, true), problems[1])
    end
    local _, p = toolcall.parse(nil)
    eq(#p, 1)
  end)
  it("reads at most MAX_TAGS tags of a turn, whatever it holds (100k unclosed <tool_call>s, long blanks)", function()
    local text = ('<tool_call>{"name": "x"' .. string.rep(" ", 20)):rep(100000)
    local calls, problems = toolcall.parse(text)
    eq(#calls, 0)
    eq(#problems, toolcall.MAX_TAGS + 1)
    eq(problems[#problems], ("%d more <tool_call> tags in this turn were not read (at most %d are)")
      :format(100000 - toolcall.MAX_TAGS, toolcall.MAX_TAGS))
    -- one closing tag at the very end: each position of the text is searched once
    calls, problems = toolcall.parse(string.rep("<tool_call>", 100000) .. "</tool_call>")
    eq(#problems, toolcall.MAX_TAGS + 1)
    -- a call whose body is padded with a megabyte of blanks still parses
    calls = toolcall.parse('<tool_call>' .. string.rep(" ", 2 ^ 20) .. '{"name": "a", "arguments": {}}'
      .. string.rep(" \n", 2 ^ 19) .. '</tool_call>')
    eq(#calls, 1)
    eq(calls[1].name, "a")
    -- the calls before the cap are kept
    calls = toolcall.parse(('<tool_call>{"name": "a", "arguments": {}}</tool_call>'):rep(70))
    eq(#calls, toolcall.MAX_TAGS)
  end)
end)

describe("rl.agent.calc", function()
  it("evaluates arithmetic with precedence, powers and signs", function()
    for expr, want in pairs { ["3*4"] = "12", ["3*(4+2)^2"] = "108", ["-2^2"] = "-4", ["2**3**2"] = "512",
                              ["7/2"] = "3.5", ["10//3"] = "3", ["10 % 4"] = "2", ["1,000 + 5"] = "1005",
                              [" 12 - 3 - 4 "] = "5", ["1e3"] = "1000", [".5*4"] = "2", ["-(-3)"] = "3" } do
      local v, err = calc.eval(expr)
      eq(v and calc.format(v), want, expr .. " " .. tostring(err))
    end
  end)
  it("refuses what is not arithmetic, naming the position", function()
    for expr, msg in pairs { ["1/0"] = "division by zero", ["2+"] = "end of expression",
                             ["os.exit(1)"] = "unexpected 'o' at position 1", ["(1"] = "missing ')'",
                             ["1,00"] = "thousands separator", ["2 3"] = "unexpected '3'",
                             ["9^9^9"] = "not a finite number", [string.rep("(", 200) .. "1"] = "nested too deeply" } do
      local v, err = calc.eval(expr)
      eq(v, nil, expr)
      ok(err:find(msg, 1, true), expr .. ": " .. tostring(err))
    end
    eq(select(2, calc.eval(5)), "expression must be a string, got number")
  end)
end)

describe("rl.agent.tools", function()
  local reg = tools.registry { tools.calculator(), tools.lua_check(), tools.json_check(),
    { name = "spin", fn = function() local i = 0; while true do i = i + 1 end end, timeout = 0.2 },
    { name = "sleepy", fn = function() rl.sleep(600); return "late" end, timeout = 0.2 },
    { name = "boom", fn = function() error("kaboom") end },
    { name = "nothing", fn = function() return nil, "no such key" end },
    { name = "table", fn = function(args) return { echo = args.v } end } }

  it("runs tools and reports each outcome as content for the model", function()
    local cases = {
      { { name = "calculator", arguments = { expression = "3*4" } }, "12", "ok" },
      { { name = "calculator", arguments = {} }, 'missing argument "expression"', "bad_arguments" },
      { { name = "calculator", arguments = { expression = 5 } }, "must be a string", "bad_arguments" },
      { { name = "calculator", arguments = { expression = "1/0" } }, "division by zero", "error" },
      { { name = "search", arguments = {} }, 'unknown tool "search"; the tools are: calculator', "unknown_tool" },
      { { name = "boom", arguments = {} }, "kaboom", "error" },
      { { name = "nothing", arguments = {} }, "no such key", "error" },
      { { name = "table", arguments = { v = 3 } }, '{"echo":3}', "ok" },
      { { name = "lua_check", arguments = { code = "local x = 1 +" } }, "syntax error: line 1:", "ok" },
      { { name = "lua_check", arguments = { code = "os.exit(1)" } }, "ok", "ok" },   -- compiled, never run
      { { name = "json_check", arguments = { text = '{"a": 1' } }, "invalid JSON", "ok" },
      { { name = "json_check", arguments = { text = "[1, 2]" } }, "ok", "ok" },
    }
    for _, c in ipairs(cases) do
      local content, outcome = reg:call(c[1])
      eq(outcome, c[3], c[1].name)
      ok(content:find(c[2], 1, true), content)
    end
    eq(reg:call { name = "lua_check", arguments = { code = "\27LJ bytecode" } }:sub(1, 12), "syntax error")
  end)
  it("holds each tool's time limit, for busy and for waiting tools", function()
    -- the outcomes show the limits held: without them `spin` never returns and `sleepy`
    -- returns "late" after 600 s (the spec's 60 s timeout catches either; no timing here)
    local content, outcome = reg:call { name = "spin", arguments = {} }
    eq(outcome, "timeout")
    ok(content:find("timed out after 0.2 s", 1, true), content)
    content, outcome = reg:call { name = "sleepy", arguments = {} }
    eq(outcome, "timeout")
    ok(content:find("timed out after 0.2 s", 1, true), content)
  end)
  it("lists OpenAI tool schemas and refuses bad specs", function()
    local s = reg:schemas()
    eq(s[1].type, "function")
    eq(s[1]["function"].name, "calculator")
    eq(s[1]["function"].parameters.required[1], "expression")
    raises(function() reg:add { name = "x y", fn = print } end, "tool.name")
    raises(function() reg:add { name = "x" } end, "bad argument 'tool.fn'")
    raises(function() reg:add { name = "x", fn = print, timeout = -1 } end, "tool.timeout")
  end)
end)

describe("rl.agent.env.tool_env", function()
  it("answers several calls, caps calls per turn, ends on a turn without calls", function()
    local env = rl.agent.tool_env { tools = tools.registry { tools.calculator() }, max_calls_per_turn = 2 }
    local turn = {}
    local obs, r, done = env:step { text = '<tool_call>{"name":"calculator","arguments":{"expression":"2+2"}}</tool_call>'
      .. '<tool_call>{"name":"calculator","arguments":{"expression":"2/0"}}</tool_call>'
      .. '<tool_call>{"name":"calculator","arguments":{"expression":"1"}}</tool_call><tool_call>{bad</tool_call>',
      record = turn, sample = rl.sample.new() }
    eq(done, false)
    eq(r, nil)
    eq(#obs, 4)
    ok(obs[1].content:find('error: tool call 4: bad JSON (text: invalid JSON at byte 2', 1, true), obs[1].content)
    ok(obs[1].content:find('write {"name": ..., "arguments": {...}}', 1, true), obs[1].content)
    eq(obs[2].content, "4")
    ok(obs[3].content:find("division by zero", 1, true))
    ok(obs[4].content:find("at most 2 tool calls per turn", 1, true), obs[4].content)
    eq(turn.tool_calls, 4)
    eq(turn.tool_errors, 3)
    obs, r, done = env:step { text = "The answer is 4.", record = {}, sample = rl.sample.new() }
    eq(obs, nil)
    eq(done, true)
  end)

  it("keeps what quotes the model's broken UTF-8 valid (it must encode as JSON)", function()
    local env = rl.agent.tool_env { tools = tools.registry { tools.calculator() }, max_calls_per_turn = 3 }
    local turn = {}
    -- a tool name cut mid-character, a bad JSON body with a lone continuation byte, an expression with one
    local obs = env:step { text = '<tool_call>{"name":"calc\xE2\x88","arguments":{"expression":"1"}}</tool_call>'
      .. '<tool_call>{"name": \x80\xFF}</tool_call>'
      .. '<tool_call>{"name":"calculator","arguments":{"expression":"2\xC3+1"}}</tool_call>',
      record = turn, sample = rl.sample.new() }
    eq(#obs, 3)
    for _, m in ipairs(obs) do
      local text = rl.json.encode(m)       -- raises on invalid UTF-8
      ok(rl.json.decode(text).content == m.content)
    end
    ok(rl.json.encode(turn))
    eq(rl.json.valid_utf8("ok \xE2\x88\x91 \xE2\x88 \xED\xA0\x80 \xF4\x90\x80\x80 \xC0\xAF"),
      "ok \xE2\x88\x91 \xEF\xBF\xBD \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD "
      .. "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD \xEF\xBF\xBD\xEF\xBF\xBD")
  end)
end)

describe("rl.agent.trajectory", function()
  local tok = assert(rl.tokenizer.load(QWEN25))
  local im_end = tok:token_to_id("<|im_end|>")

  it("renders a tool turn with the chat template's own markers, after the model's <|im_end|>", function()
    local ids, text = T.observation_ids(tok, { { role = "tool", content = "12" } }, im_end)
    eq(text, "\n<|im_start|>user\n<tool_response>\n12\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    eq(ids, tok:encode(text, { add_special_tokens = false }))
    -- a turn that did not end with <|im_end|> (stopped by a stop string) gets the template's end of turn
    local _, text2 = T.observation_ids(tok, { { role = "tool", content = "12" } }, tok:encode("x")[1])
    eq(text2, "<|im_end|>\n<|im_start|>user\n<tool_response>\n12\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    local _, text3 = T.observation_ids(tok, { { role = "tool", content = "a" }, { role = "tool", content = "b" } }, im_end)
    eq(text3, "\n<|im_start|>user\n<tool_response>\na\n</tool_response>\n<tool_response>\nb\n</tool_response><|im_end|>"
      .. "\n<|im_start|>assistant\n")
  end)

  it("keeps output ids a decode -> re-encode would change", function()
    -- the engine may sample "Hel" + "lo" (two tokens); the text "Hello" encodes to one other id
    local out = {}
    for _, word in ipairs { "Hello", " world" } do
      local whole = tok:encode(word, { add_special_tokens = false })
      eq(#whole, 1, word)
      local split
      for i = 1, #word - 1 do
        local a, b = tok:encode(word:sub(1, i), { add_special_tokens = false }), tok:encode(word:sub(i + 1), { add_special_tokens = false })
        if #a == 1 and #b == 1 then split = { a[1], b[1] } end
      end
      ok(split, "a two-token spelling of " .. word)
      out[#out + 1], out[#out + 2] = split[1], split[2]
    end
    out[#out + 1] = im_end
    local reencoded = tok:encode(tok:decode(out), { add_special_tokens = false })
    ok(#reencoded < #out, "BPE merges the re-encoded text differently")
    local prompt = tok:apply_chat_template({ { role = "user", content = "say hi" } }, { add_generation_prompt = true,
                                                                                        tokenize = true })
    local s = rl.sample.new { tokens = rl.json.array { unpack(prompt) } }
    T.begin(s)
    local lps = {}
    for i = 1, #out do lps[i] = -0.1 * i end
    T.append_output(s, out, lps, { finish_reason = { type = "stop" }, weight_version = "7" })
    T.close_output(s)
    local oids = T.observation_ids(tok, { { role = "tool", content = "ok" } }, im_end)
    T.append_observation(s, oids, { { role = "tool", content = "ok" } })
    T.append_output(s, out, lps, { finish_reason = { type = "stop" }, weight_version = "8" })
    T.finish(s, "done")
    assert(T.check(s))
    local want = {}
    for _, part in ipairs { prompt, out, oids, out } do for _, id in ipairs(part) do want[#want + 1] = id end end
    eq(s.tokens, want)
    local batch = rl.rollout.train_data.convert({ (function() s.reward = 1; return s end)() }, { normalize = false })
    eq(batch.tokens[1], want)
    local mask = {}
    for i = 1, #out do mask[#mask + 1] = 1 end
    for _ = 1, #oids do mask[#mask + 1] = 0 end
    for i = 1, #out do mask[#mask + 1] = 1 end
    eq(batch.loss_masks[1], mask)
    eq(batch.rollout_log_probs[1][1], -0.1)
    eq(batch.rollout_log_probs[1][#out + 1], 0.0)
    local wv = T.token_weight_versions(s)
    eq(wv[1], "7"); eq(wv[#out + 1], false); eq(wv[#wv], "8")
    -- what re-tokenizing the trajectory's text would have trained on instead
    local text_ids = tok:encode(tok:decode(s.tokens), { add_special_tokens = false })
    ok(#text_ids ~= #s.tokens, "re-encoding the whole trajectory changes the ids")
    -- a corrupted buffer is caught
    s.loss_mask[#out + 1] = 1
    local good, why = T.check(s)
    eq(good, false)
    ok(why:find("observation token", 1, true), why)
  end)
end)

describe("rl.agent prompts", function()
  it("renders a tool environment's tools into the prompt with the chat template, once", function()
    local tok = assert(rl.tokenizer.load(QWEN25))
    local reg = tools.registry { tools.calculator() }
    local agent = rl.agent.new { env = rl.agent.tool_env { tools = reg }, tokenizer = tok }
    local ro = rl.rollout.new { url = "http://127.0.0.1:1", tokenizer = tok }
    local s = rl.sample.new { prompt = { { role = "user", content = "What is 3*4?" } } }
    agent:tokenize(ro, s)
    local text = tok:decode(s.tokens)
    ok(text:find("# Tools", 1, true) and text:find('"name": "calculator"', 1, true), text)
    ok(text:find("<|im_start|>assistant\n$"), text)
    raises(function() rl.agent.new { env = {} } end, "needs a step method")
    raises(function() rl.agent.new { env = { step = print }, max_turn = 3 } end, "opts.max_turn' (unknown option)")
  end)
end)

describe("rl.agent.http_env", function()
  local server, url
  local function start()
    if url then return url end
    local pf = os.tmpname()
    os.remove(pf)
    server = assert(rl.process.spawn { "python3", HERE .. "/support/agent_env_server.py", pf })
    local deadline = rl.now() + 20
    while not url do
      url = read_file(pf)
      if not url then
        ok(rl.now() < deadline and server:running(), "the env server started")
        rl.sleep(0.05)
      end
    end
    return url
  end

  it("speaks the reset/step/close protocol with a Python server", function()
    local env = rl.agent.http_env { url = start() }
    local s = rl.sample.new { prompt = "q", label = "12", index = 3 }
    local inst = env.new(s)
    eq(inst:reset(s), rl.json.null)
    local obs, r, done = inst:step { text = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "3*4"}}\n'
      .. "</tool_call>", turn = 1 }
    eq(done, false)
    eq(r, nil)
    eq(obs[1].role, "tool")
    eq(obs[1].tool_call_id, "call_1_1")
    eq(obs[1].content, "12")
    obs, r, done = inst:step { text = "So 12.", turn = 2 }
    eq(done, true)
    eq(r, 1.0)
    inst:close()
    local log = rl.json.decode(rl.http.get(url .. "/log").body)
    eq(log.sessions, 0)
    local step = log.log[2].body
    eq(step.session_id, s.metadata.env_session)
    eq(step.action.role, "assistant")
    eq(step.action.tool_calls[1]["function"].name, "calculator")
    eq(rl.json.decode(step.action.tool_calls[1]["function"].arguments).expression, "3*4")
  end)

  it("fails with the server's message on a refused request, and on an unreachable server", function()
    local env = rl.agent.http_env { url = start() }
    local inst = env.new(rl.sample.new())
    local okc, err = pcall(inst.step, inst, { text = "x", turn = 1 })   -- no reset: unknown session
    eq(okc, false)
    ok(err:find("POST " .. url .. "/step: HTTP 400", 1, true) and err:find("unknown session", 1, true), err)
    local dead = rl.agent.http_env { url = "http://127.0.0.1:1", retries = 0, timeout = 2 }
    okc, err = pcall(function() local i = dead.new(rl.sample.new()); return i:reset(rl.sample.new()) end)
    eq(okc, false)
    ok(err:find("POST http://127.0.0.1:1/reset", 1, true), err)
    raises(function() rl.agent.http_env { url = "localhost:80" } end, "http:// URL expected")
  end)

  it("never sends a step twice: a step the server took but did not answer fails the sample", function()
    local env = rl.agent.http_env { url = start(), timeout = 2 }
    local function steps_of(sid)
      local n = 0
      for _, e in ipairs(rl.json.decode(rl.http.get(url .. "/log").body).log) do
        if e.path == "/step" and e.body.session_id == sid then n = n + 1 end
      end
      return n
    end
    for _, text in ipairs { "DROP", "SLOW" } do   -- no answer (the connection closes) / no answer in time
      local s = rl.sample.new { prompt = "q" }
      local inst = env.new(s)
      inst:reset(s)   -- (a kept-alive connection the step could be resent on)
      local okc, err = pcall(inst.step, inst, { text = text, turn = 1 })
      eq(okc, false)
      ok(err:find("/step: ", 1, true) and err:find("a step is sent once, never again", 1, true), err)
      eq(steps_of(s.metadata.env_session), 1, text .. ": the server saw the step once")
    end
  end, { timeout = 60 })

  it("an answer larger than max_response fails the sample instead of filling memory", function()
    local env = rl.agent.http_env { url = start(), max_response = 2 ^ 20 }
    local s = rl.sample.new { prompt = "q" }
    local inst = env.new(s)
    inst:reset(s)
    local okc, err = pcall(inst.step, inst, { text = "BIG", turn = 1 })
    eq(okc, false)
    ok(err:find("response body over the limit of 1048576 bytes", 1, true), err)
    server:stop()
  end, { timeout = 60 })
end)

describe("rl.agent.watch_env", function()
  it("reloads the environment module between steps, keeping the old one on a broken edit", function()
    local dir = tmpdir(true)
    local path = dir .. "/agent_env_reload_test.lua"
    write_file(path, "local E = {}\nfunction E:step(a) return 'v1', nil, false end\nreturn E\n")
    package.path = dir .. "/?.lua;" .. package.path
    local env = rl.agent.watch_env("agent_env_reload_test")
    local inst = env.new(rl.sample.new())
    eq(inst:step {}, "v1")
    local h1 = env.version()
    write_file(path, "local E = {}\nfunction E:step(a) return 'v2 ' .. tostring(self.n), nil, false end\n"
      .. "function E.new(s) return { n = 5 } end\nreturn E\n")
    rl.reload.check()
    eq(inst:step {}, "v2 nil")               -- a running trajectory takes the new step
    eq(env.new(rl.sample.new()):step {}, "v2 5")
    ok(env.version() ~= h1)
    write_file(path, "local E = {\nreturn E\n")
    rl.reload.check()
    eq(inst:step {}, "v2 nil")
    -- the agent puts the version into its env spans
    local agent = rl.agent.new { env = env }
    local s = rl.sample.new()
    agent:env_call(s, "env_step", { turn = 1 }, function() end)
    local ev = s.trace.events[1]
    eq(ev.type .. " " .. ev.name, "span_start env_step")
    eq(ev.attrs.env_version, env.version())
  end)
end)

describe("rl.agent.metrics", function()
  it("counts turns, tool calls, errors per tool and end reasons", function()
    local function smp(turns, reason)
      return rl.sample.new { metadata = { trajectory = { turns = turns, end_reason = reason, prompt_length = 1 } } }
    end
    local m = rl.rollout.metrics.from_samples {
      smp({ { tool_calls = 2, tool_errors = 1, tools = { { name = "calculator", outcome = "ok" },
                                                        { name = "calculator", outcome = "error" } } }, {} }, "done"),
      smp({ { tool_calls = 1, tool_errors = 1, tools = { { name = "(malformed)", outcome = "malformed" } } } }, "max_turns"),
    }
    eq(m["turns/mean"], 1.5); eq(m["turns/max"], 2)
    eq(m["tool_calls/mean"], 1.5)
    eq(m["tool_errors/rate"], 2 / 3)
    eq(m["tool_success/rate"], 1 / 3)
    eq(m["tool/calculator/calls"], 2); eq(m["tool/calculator/error_rate"], 0.5)
    eq(m["tool/(malformed)/error_rate"], 1)
    eq(m["agent_end/done"], 1); eq(m["agent_end/max_turns"], 1)
    eq(rl.rollout.metrics.from_samples({ rl.sample.new() })["turns/mean"], nil)
  end)
end)
