-- What building and extending multi-turn trajectories costs next to generation
-- (issue 24: <= 5 % at 8 turns). Real engine (thread mode), rl.rollout + rl.agent, an
-- environment that parses the turn's tool calls and answers with a tool message every
-- turn for 8 turns. Timed per trajectory: the /generate calls (generation), and
-- everything else rl.agent does (trajectory bookkeeping, observation rendering and
-- tokenizing once, tool-call parsing, env step, buffer check). The peer, in the same
-- run: re-tokenizing the whole conversation every turn (decode the trajectory, render
-- the chat template, encode), what frameworks that do not keep token buffers pay.
--   rlhost bench/agent_trajectory.lua [MODEL_DIR (default: rl.mathgen.default_model())] [samples=16] [turns=8] [turn_tokens=32]
local model = arg[1] and arg[1] ~= "" and arg[1] or rl.mathgen.default_model()
local samples, turns, turn_tokens = tonumber(arg[2]) or 16, tonumber(arg[3]) or 8, tonumber(arg[4]) or 32
local T = rl.agent.trajectory

local eng = assert(rl.engine.start { model = model, threads = 1, port = 0, serve = false })
local tok = assert(rl.tokenizer.load(model))
local now = rl.now

local Env = {}
function Env:reset() self.k = 0 end
function Env:step(a)
  self.k = self.k + 1
  local calls = rl.agent.toolcall.parse(a.text)
  if self.k >= turns then return nil, 1, true end
  return { role = "tool", content = ("result %d (%d calls)"):format(self.k, #calls) }, nil, false
end

local agent = rl.agent.new { env = Env, max_turns = turns, max_total_tokens = 384, max_turn_tokens = turn_tokens,
                             on_turn_length = "continue" }
-- turns of turn_tokens/2 .. turn_tokens tokens (min_new_tokens), ended by the model's <|im_end|>
local ro = rl.rollout.new { engine = eng, tokenizer = tok, rollout_temperature = 1.0, rollout_max_response_len = turn_tokens,
  extra_sampling_params = { min_new_tokens = math.floor(turn_tokens / 2) }, custom_generate = rl.agent.generate_fn(agent) }
local gen_time = 0
local post = ro._post
ro._post = function(self, req, key)
  local t0 = now()
  local a, b, c = post(self, req, key)
  gen_time = gen_time + (now() - t0)
  return a, b, c
end

-- the token-buffer work alone: rendering + tokenizing observations, appending outputs and observations
local buffer_time = 0
local function timed(tbl, name)
  local f = tbl[name]
  tbl[name] = function(...)
    local t0 = now()
    local a, b = f(...)
    buffer_time = buffer_time + (now() - t0)
    return a, b
  end
end
timed(agent, "observation_ids")
timed(T, "append_output")
timed(T, "append_observation")

local function retokenize_cost(s)
  -- the peer: after every turn, rebuild the conversation's text and encode it all again
  local t0 = now()
  local tr = s.metadata.trajectory
  local msgs = { s.prompt[1] }
  for _, t in ipairs(tr.turns) do
    local ids = { unpack(s.tokens, t.output_start, t.output_start + t.output_length - 1) }
    msgs[#msgs + 1] = { role = "assistant", content = tok:decode(ids, { skip_special_tokens = true }) }
    if t.observation then for _, m in ipairs(t.observation) do msgs[#msgs + 1] = m end end
    local text = tok:apply_chat_template(msgs, { add_generation_prompt = true })
    tok:encode(text, { add_special_tokens = false })
  end
  return now() - t0
end

local function run(n, report)
  local total, gen, peer, tok_count, turn_count = 0, 0, 0, 0, 0
  buffer_time = 0
  for i = 1, n do
    local s = rl.sample.new { prompt = { { role = "user", content = "Tom has 3 apples. He buys 4 more. How many?" } },
                              index = i, group_index = i }
    gen_time = 0
    local t0 = now()
    s = ro:generate_and_rm(s, ro:sampling_params())
    local dt = now() - t0
    assert(T.check(s))
    total, gen = total + dt, gen + gen_time
    peer = peer + retokenize_cost(s)
    tok_count, turn_count = tok_count + #s.tokens, turn_count + #s.metadata.trajectory.turns
  end
  if report then
    local over = total - gen
    print(("%d trajectories, %.1f turns and %.0f tokens each (%s)"):format(n, turn_count / n, tok_count / n, model))
    print(("generation (the /generate calls):          %8.1f ms per trajectory"):format(1000 * gen / n))
    print(("rlhost's trajectory work (all the rest):    %8.2f ms per trajectory  = %5.2f %% of generation"):format(
      1000 * over / n, 100 * over / gen))
    print(("  of which the token buffer (observations rendered and tokenized once, appends): %.2f ms = %.2f %%"):format(
      1000 * buffer_time / n, 100 * buffer_time / gen))
    print(("peer: re-tokenize the conversation per turn: %7.2f ms per trajectory  = %5.2f %% of generation"):format(
      1000 * peer / n, 100 * peer / gen))
  end
end

rl.trace.enabled(true)
run(2)   -- warm-up (JIT, caches)
run(samples, true)
eng:stop()
