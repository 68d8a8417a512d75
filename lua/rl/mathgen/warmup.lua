--- rl.mathgen.warmup: builds the embedded default model — a small Llama trained from
--- scratch by SFT on rl.mathgen's problems, with a tokenizer derived from them — and
--- caches it. recipes/sft_warmup.lua is this module's command line.
--
--   local dir = rl.mathgen.default_model()        -- cached: $XDG_CACHE_HOME/rlhost/default-math-model-v1
--   local report = warmup.build(opt, "/tmp/m")     -- opt: warmup.options() defaults overridden by flags
--
-- The output is an ordinary HF directory (config.json, model.safetensors,
-- tokenizer.json, tokenizer_config.json with a ChatML template) plus data/train.jsonl,
-- data/test.jsonl (the SFT split and the held-out split) and warmup.json (what build
-- measured). Deterministic for a seed and a thread count.
local rl = require "rl"
local mathgen = require "rl.mathgen"
local mtok = require "rl.mathgen.tokenizer"
local mtools = require "rl.mathgen.tools"

local M = {}

--- Bump when the defaults or the code change what build writes: it names the cache entry.
M.VERSION = 2
--- The same for the tool-using default model (`default_model{tools = true}`).
M.TOOLS_VERSION = 2

--- The tool-using default model's defaults, where they differ (`--tools`): amounts
--- the small model cannot add or multiply in its head, half the SFT traces worked
--- with the calculator, longer traces, 600 SFT steps (the calculator chats need more than
--- the default model's 400 to copy numbers from the question into the calls).
M.TOOL_DEFAULTS = { max_number = 20, max_factor = 9, final_noise = 0, tool_rate = 0.5, max_new_tokens = 256,
                    steps = 600 }

--- The build options as an rl.args spec (appended to spec when given); the defaults
--- are the default model's, or with tools the tool-using one's.
function M.options(spec, tools)
  spec = spec or {}
  local first = #spec + 1
  for _, o in ipairs {
    { name = "seed", type = "int", default = 1, help = "seed of the data, the initial weights and the order" },
    { name = "train_size", type = "int", default = 8000, help = "generated training problems" },
    { name = "test_size", type = "int", default = 500, help = "held-out problems (another seed, none seen in training)" },
    { name = "max_number", type = "int", default = mathgen.DEFAULTS.max_number, help = "largest amount in a problem" },
    { name = "max_factor", type = "int", default = mathgen.DEFAULTS.max_factor, help = "largest count, price or multiplier" },
    { name = "step_weights", type = "list", of = "number", default = mathgen.DEFAULTS.steps,
      help = "weights of 1-, 2- and 3-step problems" },
    { name = "final_noise", type = "number", default = 0.4,
      help = "share of SFT answers whose final '#### N' line is wrong (noisy labels GRPO can correct)" },
    { name = "max_merges", type = "int", default = 1000, help = "BPE merges at most (the vocabulary's size)" },
    { name = "hidden_size", type = "int", default = 128 },
    { name = "num_layers", type = "int", default = 4 },
    { name = "num_heads", type = "int", default = 4 },
    { name = "intermediate_size", type = "int", default = 512 },
    { name = "max_position_embeddings", type = "int", default = 384 },
    { name = "steps", type = "int", default = 400, help = "optimiser steps" },
    { name = "batch_size", type = "int", default = 32, help = "problems per optimiser step" },
    { name = "micro_batch_size", type = "int", default = 32 },
    { name = "lr", type = "number", default = 4e-3 },
    { name = "min_lr", type = "number", default = 3e-4 },
    { name = "warmup_steps", type = "int", default = 20 },
    { name = "weight_decay", type = "number", default = 0.01 },
    { name = "threads", type = "int", default = 2, help = "LibTorch threads for training and evaluation" },
    { name = "max_new_tokens", type = "int", default = 128, help = "evaluation: tokens generated per problem" },
    { name = "log_every", type = "int", default = 10, help = "a progress line every N steps" },
    { name = "tools", type = "bool", default = false,
      help = "the tool-using model: SFT on chats that call a calculator (rl.mathgen.tools); changes the defaults" },
    { name = "tool_rate", type = "number", default = 0,
      help = "with --tools: share of SFT chats worked with the calculator (the others work in the head)" },
  } do spec[#spec + 1] = o end
  for k = first, #spec do
    local o = spec[k]
    if tools and M.TOOL_DEFAULTS[o.name] ~= nil then o.default = M.TOOL_DEFAULTS[o.name] end
    if o.name == "tools" then o.default = tools or false end
  end
  return spec
end

--- The default options (what `options(nil, tools)` declares).
function M.defaults(tools)
  local d = {}
  for _, o in ipairs(M.options(nil, tools)) do d[o.name] = o.default end
  return d
end

local function sh(cmd)
  if not os.execute(cmd) then error("command failed: " .. cmd, 2) end
end
local q = require("rl.process").quote
local fs = require "rl._fs"
local remove_tree = fs.remove_tree
local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

--- A chat-formatted problem: prompt ids and answer ids (ending with the eos token).
function M.encode(tok, p)
  local prompt = tok:apply_chat_template({ { role = "user", content = p.question } },
    { add_generation_prompt = true, tokenize = true })
  local answer = tok:encode(p.answer, { add_special_tokens = false })
  answer[#answer + 1] = tok.eos_token_ids[1]
  return prompt, answer
end

--- A chat of rl.mathgen.tools.trace as the trainer sees it: the ids of the prompt and
--- every later turn, the number after the prompt, and the loss mask over those (1 on
--- the assistant's tokens and its eos, 0 on each tool turn, which is the template's
--- text between the assistant's <|im_end|> and the next assistant turn's first token).
function M.encode_chat(tok, msgs)
  local ids = tok:apply_chat_template({ msgs[1] }, { add_generation_prompt = true, tokenize = true })
  local n_prompt, mask = #ids, {}
  local function add(list, m)
    for _, id in ipairs(list) do
      ids[#ids + 1] = id
      mask[#mask + 1] = m
    end
  end
  for k = 2, #msgs do
    local msg = msgs[k]
    if msg.role == "assistant" then
      add(tok:encode(msg.content, { add_special_tokens = false }), 1)
      add({ tok.eos_token_ids[1] }, 1)
    else
      add(M.observation_ids(tok, msg.content), 0)
    end
  end
  return ids, #ids - n_prompt, mask
end

--- The ids of a tool turn that answers `content`: "\n" (the template's, after the
--- assistant's <|im_end|>), the tool turn, and the next assistant header.
function M.observation_ids(tok, content)
  local text = tok:apply_chat_template({ { role = "tool", content = content } }, { add_generation_prompt = true })
  return tok:encode("\n" .. text, { add_special_tokens = false })
end

--- Accuracy of model directory dir on problems at a temperature: mean gsm8k reward,
--- and the responses. Runs a thread-mode engine without a server.
function M.evaluate(dir, problems, opts)
  local gsm8k = require "rl.rewards.gsm8k"
  local tok = assert(rl.tokenizer.load(dir))
  local eng = assert(rl.engine.start { model = dir, threads = opts.threads or 2, serve = false })
  local prompts, params = {}, {}
  for i, p in ipairs(problems) do
    prompts[i] = M.encode(tok, p)
    params[i] = { temperature = opts.temperature or 0, max_new_tokens = opts.max_new_tokens or 128,
                  sampling_seed = (opts.seed or 0) * 100003 + i }
  end
  local out = assert(eng:generate { input_ids = prompts, sampling_params = params })
  eng:stop()
  local correct, texts = 0, {}
  for i, p in ipairs(problems) do
    texts[i] = out[i].text
    correct = correct + gsm8k.score(out[i].text, p.answer)
  end
  return correct / #problems, texts
end

--- Like evaluate, for the tool-using model: each problem is a chat in which every
--- <tool_call> the model ends a turn with is answered (rl.agent's calculator), up
--- to opts.max_turns (6) turns and opts.max_new_tokens generated tokens in all. Returns
--- the accuracy, the responses (turns and tool turns as text) and tool statistics:
--- {calls, failed (not parsed or not computed), with_tool (share of responses that called)}.
function M.evaluate_tools(dir, problems, opts)
  local gsm8k = require "rl.rewards.gsm8k"
  local tools, toolcall, calc = require "rl.mathgen.tools", require "rl.agent.toolcall", require "rl.agent.calc"
  local tok = assert(rl.tokenizer.load(dir))
  local eng = assert(rl.engine.start { model = dir, threads = opts.threads or 2, serve = false })
  local budget, eos = opts.max_new_tokens or 256, tok.eos_token_ids[1]
  local context = opts.context or math.huge   -- prompt, turns and tool turns must fit
  local st = {}
  for i, p in ipairs(problems) do
    st[i] = { ids = M.encode(tok, p), used = 0, text = "", calls = 0, failed = 0, done = false }
  end
  for turn = 1, opts.max_turns or 6 do
    local active, prompts, params = {}, {}, {}
    for i, s in ipairs(st) do
      local room = math.min(budget - s.used, context - #s.ids)
      if room <= 0 then s.done = true end
      if not s.done then
        active[#active + 1] = i
        prompts[#active] = s.ids
        params[#active] = { temperature = opts.temperature or 0, max_new_tokens = room,
                            sampling_seed = ((opts.seed or 0) * 100003 + i) * 7 + turn }
      end
    end
    if #active == 0 then break end
    local out = assert(eng:generate { input_ids = prompts, sampling_params = params })
    for k, i in ipairs(active) do
      local s, o = st[i], out[k]
      for _, id in ipairs(o.output_ids) do s.ids[#s.ids + 1] = id end
      s.used = s.used + #o.output_ids
      s.text = s.text .. o.text
      s.done = true
      local calls, problems = toolcall.parse(o.text)
      if (#calls > 0 or #problems > 0) and o.output_ids[#o.output_ids] == eos and s.used < budget then
        s.calls = s.calls + 1
        local call, err, v = calls[1], problems[1], nil
        if call and call.name ~= tools.TOOL then err = "unknown tool '" .. tostring(call.name) .. "'" end
        if call and not err then v, err = calc.eval(call.arguments.expression) end
        -- an error may quote the model's text, which can hold broken UTF-8 (byte-level tokens)
        local result = v and calc.format(v) or ("error: " .. tostring(err)):gsub("[\128-\255]", "?")
        if not v then s.failed = s.failed + 1 end
        for _, id in ipairs(M.observation_ids(tok, result)) do s.ids[#s.ids + 1] = id end
        s.text = s.text .. "\n[tool] " .. result .. "\n"
        s.done = turn == (opts.max_turns or 6)
      end
    end
  end
  eng:stop()
  local correct, texts, stats = 0, {}, { calls = 0, failed = 0, with_tool = 0 }
  for i, p in ipairs(problems) do
    local s = st[i]
    texts[i] = s.text
    correct = correct + gsm8k.score(s.text, p.answer)
    stats.calls, stats.failed = stats.calls + s.calls, stats.failed + s.failed
    if s.calls > 0 then stats.with_tool = stats.with_tool + 1 end
  end
  stats.with_tool = stats.with_tool / #problems
  return correct / #problems, texts, stats
end

--- p with its final line wrong: the first worked line's result when that differs,
--- else the answer off by 1 to 3 (never negative). r is an rl.pyrandom.
function M.noisy(p, r)
  local first = tonumber(p.answer:match("=%$?(%d+)"))
  local wrong = first ~= p.value and first or nil
  if not wrong then
    local d = r:randbelow(3) + 1
    wrong = (p.value > d and r:random() < 0.5) and p.value - d or p.value + d
  end
  return { question = p.question, answer = p.answer:gsub("#### %d+$", "#### " .. wrong), value = p.value }
end

--- Share of responses whose final line is not the result of their last worked line.
function M.final_mismatch_rate(texts)
  local n = 0
  for _, t in ipairs(texts) do
    local last, final
    for v in t:gmatch("=%$?(%d+)") do last = v end
    final = t:match("####%s*(%d+)")
    if last and final and last ~= final then n = n + 1 end
  end
  return #texts > 0 and n / #texts or 0
end

--- One epoch of batches: lists of indices 1..n in a seeded shuffled order (the
--- remainder that does not fill a batch waits for the next epoch's order).
function M.batches(n, size, seed)
  local order, out = {}, {}
  for k = 1, n do order[k] = k end
  rl.pyrandom.new(seed):shuffle(order)
  for k = 1, n - size + 1, size do out[#out + 1] = { unpack(order, k, k + size - 1) } end
  return out
end

-- The SFT data: each training problem as a chat (with --tools, rl.mathgen.tools.trace: a
-- --tool-rate share of them work every operation with the calculator, the others in the
-- head) and as the text the model will see (the ChatML rendering of
-- rl.model.byte_tokenizer's template). Noisy labels, as in scraped data: a share of the
-- answers work the problem right but end on a wrong "#### N" line. The warm model learns
-- that habit and GRPO, rewarded on the final line only, has a real behaviour to correct.
local function sft_data(opt, train)
  local noise, use_tool = rl.pyrandom.new(opt.seed * 7919 + 17), rl.pyrandom.new(opt.seed * 7919 + 29)
  local chats, texts = {}, {}
  for i, clean in ipairs(train) do
    local p = clean
    if noise:random() < opt.final_noise then p = M.noisy(p, noise) end
    if opt.tools then
      chats[i] = mtools.trace(p, use_tool:random() < opt.tool_rate)
      texts[i] = mtools.render(chats[i])
    else
      chats[i] = p
      texts[i] = "<|im_start|>user\n" .. p.question .. "<|im_end|>\n<|im_start|>assistant\n" .. clean.answer
        .. "<|im_end|>"
    end
  end
  return chats, texts
end

-- A tokenizer derived from the training texts, and a random Llama over its vocabulary
-- written into dir. → the tokenizer.
local function init_model(opt, dir, texts)
  local tok_dir = dir .. ".tokenizer"
  sh("mkdir -p " .. q(tok_dir))
  local tj, tc = mtok.derive(texts, { max_merges = opt.max_merges, max_length = opt.max_position_embeddings,
    tools = opt.tools })
  assert(mtok.save(tok_dir, tj, tc))
  local tok = assert(rl.tokenizer.load(tok_dir))
  local config = {
    architectures = { "LlamaForCausalLM" }, model_type = "llama", vocab_size = tok.vocab_size,
    hidden_size = opt.hidden_size, intermediate_size = opt.intermediate_size, num_hidden_layers = opt.num_layers,
    num_attention_heads = opt.num_heads, num_key_value_heads = opt.num_heads,
    max_position_embeddings = opt.max_position_embeddings, rms_norm_eps = 1e-5, rope_theta = 10000,
    tie_word_embeddings = false, eos_token_id = tok.eos_token_ids[1], pad_token_id = tok.pad_token_id,
  }
  assert(rl.model.init { config = config, seed = opt.seed, dir = dir, tokenizer = tok_dir })
  sh("rm -rf " .. q(tok_dir))
  return tok
end

-- Each chat as token ids with the number of trained (answer) tokens and, for tool
-- chats, their loss mask.
local function sft_sequences(opt, tok, chats)
  local seqs = {}
  for i, c in ipairs(chats) do
    if opt.tools then
      local ids, n, mask = M.encode_chat(tok, c)
      seqs[i] = { tokens = ids, n = n, mask = mask }
    else
      local prompt, answer = M.encode(tok, c)
      for _, id in ipairs(answer) do prompt[#prompt + 1] = id end
      seqs[i] = { tokens = prompt, n = #answer }
    end
  end
  return seqs
end

-- opt.steps SFT steps over seeded shuffled epochs of seqs. → the loss curve (every
-- --log-every steps), the tokens trained and the seconds it took.
local function sft_train(opt, tr, seqs, log)
  local batches, next_batch, epoch = {}, 1, 0
  local curve, window, tokens, t_train = {}, {}, 0, rl.now()
  for step = 1, opt.steps do
    if next_batch > #batches then
      batches, next_batch, epoch = M.batches(#seqs, opt.batch_size, opt.seed * 1000 + epoch), 1, epoch + 1
    end
    local b = { tokens = {}, response_lengths = {}, rewards = {}, loss_masks = {} }
    next_batch = next_batch + 1
    for i, k in ipairs(batches[next_batch - 1]) do
      local s = seqs[k]
      local mask = s.mask
      if not mask then
        mask = {}
        for j = 1, s.n do mask[j] = 1 end
      end
      b.tokens[i], b.response_lengths[i], b.rewards[i], b.loss_masks[i] = s.tokens, s.n, 0, mask
      tokens = tokens + #s.tokens
    end
    local m = assert(tr:train(b))
    window[#window + 1] = m["train/loss"]
    if step % opt.log_every == 0 or step == opt.steps then
      local sum = 0
      for _, v in ipairs(window) do sum = sum + v end
      local dt = rl.now() - t_train
      curve[#curve + 1] = { step = step, loss = sum / #window }
      log("step %d/%d  loss %.4f  lr %.2e  %.0f tok/s  %.0f s", step, opt.steps, sum / #window, m["train/lr"],
        tokens / dt, dt)
      window = {}
    end
  end
  return curve, tokens, rl.now() - t_train
end

-- Held-out accuracy, greedy and at temperature 1 (GRPO samples there). → the report's
-- accuracy, final_mismatch_rate, tool_calls and example parts, and the seconds it took.
local function held_out(opt, dir, test, log)
  local t_eval = rl.now()
  local eopt = { threads = opt.threads, max_new_tokens = opt.max_new_tokens, seed = opt.seed,
                 context = opt.max_position_embeddings }
  local evaluate = opt.tools and M.evaluate_tools or M.evaluate
  eopt.temperature = 0
  local acc0, texts, tools0 = evaluate(dir, test, eopt)
  eopt.temperature = 1
  local acc1, texts1, tools1 = evaluate(dir, test, eopt)
  local mis0, mis1 = M.final_mismatch_rate(texts), M.final_mismatch_rate(texts1)
  log("held-out accuracy: %.3f greedy, %.3f at temperature 1 (%d problems); final line off its working: %.2f, %.2f",
    acc0, acc1, #test, mis0, mis1)
  if opt.tools then
    log("calculator: %.2f greedy, %.2f at temperature 1 of the responses call it; %d and %d calls, %d and %d failed",
      tools0.with_tool, tools1.with_tool, tools0.calls, tools1.calls, tools0.failed, tools1.failed)
  end
  return {
    accuracy = { greedy = acc0, temperature_1 = acc1, problems = #test },
    final_mismatch_rate = { greedy = mis0, temperature_1 = mis1 },
    tool_calls = opt.tools and { greedy = tools0, temperature_1 = tools1 } or nil,
    example = { question = test[1].question, response = texts[1] },
  }, rl.now() - t_eval
end

-- Options that do not decide what a build trains (threads: only the rounding of the
-- float sums, as the host's CPU does; shipped weights serve any thread count).
local NOT_TRAINING = { threads = true, log_every = true, quiet = true }

-- The SFT step taken from shipped weights: dir's config and tokenizer (just derived)
-- must be byte for byte the ones the weights were trained under. → the shipped build's
-- report, or nil and why not.
local function take_shipped(opt, dir, shipped)
  local read = fs.read_file
  local report = rl.json.decode(read(shipped .. "/warmup.json") or "null")
  if type(report) ~= "table" or report.version ~= M.VERSION then return nil, "no warmup.json of version " .. M.VERSION end
  for k in pairs(M.defaults(opt.tools)) do
    if not NOT_TRAINING[k] and rl.json.encode(report.options[k]) ~= rl.json.encode(opt[k]) then
      return nil, "trained with --" .. k:gsub("_", "-") .. " " .. rl.json.encode(report.options[k])
    end
  end
  for _, name in ipairs { "config.json", "tokenizer.json", "tokenizer_config.json" } do
    if read(shipped .. "/" .. name) ~= read(dir .. "/" .. name) then return nil, name .. " differs from this build's" end
  end
  local weights, err = read(shipped .. "/model.safetensors")
  local copied, werr = weights and fs.write_file(dir .. "/model.safetensors", weights)
  if not copied then return nil, "cannot copy model.safetensors: " .. tostring(err or werr) end
  return report
end

--- Builds the model into dir (created; must not exist) and returns the report
--- that is also written to dir/warmup.json. With `shipped` (a directory of weights
--- this build trained for the same options, M.shipped_dir) the SFT step takes them
--- instead of training, once the derived config and tokenizer are theirs byte for byte;
--- otherwise it trains (and says why), or with only_shipped fails.
function M.build(opt, dir, shipped, only_shipped)
  local t0 = rl.now()
  local log = opt.quiet and function() end or function(...) rl.log.info(...) end
  local threads_before = rl.torch.info().num_threads
  rl.torch.set_num_threads(opt.threads)
  rl.torch.manual_seed(opt.seed)
  -- 1. Problems: a training split and a held-out split.
  local train, test = mathgen.splits { seed = opt.seed, train = opt.train_size, test = opt.test_size,
    max_number = opt.max_number, max_factor = opt.max_factor, steps = opt.step_weights }
  -- 2. The SFT data, a tokenizer derived from it, a random Llama over that vocabulary.
  local chats, texts = sft_data(opt, train)
  local tok = init_model(opt, dir, texts)
  -- 3. SFT: the loss on the answer tokens only, a cosine schedule.
  local tr = rl.trainer.new {
    model = dir, loss = { loss_type = "sft_loss" }, micro_batch_size = opt.micro_batch_size,
    optimizer = { lr = opt.lr, min_lr = opt.min_lr, lr_decay_style = "cosine", lr_decay_iters = opt.steps,
                  lr_warmup_iters = opt.warmup_steps, weight_decay = opt.weight_decay, clip_grad = 1.0,
                  adam_beta2 = 0.98 },
  }
  local params = tr.model:num_parameters()
  log("sft_warmup: %d train / %d test problems, vocab %d, %.2fM parameters", #train, #test, tok.vocab_size,
    params / 1e6)
  local from, why
  if shipped then
    from, why = take_shipped(opt, dir, shipped)
    if not from and only_shipped then error("rl.mathgen.warmup: the shipped weights in " .. shipped .. " do not fit this "
      .. "build: " .. why .. " (after a change to what the build trains, bump M.VERSION and ship new weights: "
      .. "rlhost recipes/sft_warmup.lua --out models/default-math-model-v<N>)", 0) end
    if not from then rl.log.warn("not using the shipped weights in %s (%s): training them here", shipped, why) end
  end
  local curve, tokens, train_seconds
  if from then
    log("sft_warmup: the SFT step's weights are the shipped ones (%s)", shipped)
    curve, train_seconds = from.loss_curve, from.train_seconds
    tokens = from.tokens_per_second * train_seconds
  else
    curve, tokens, train_seconds = sft_train(opt, tr, sft_sequences(opt, tok, chats), log)
    assert(tr:save_model(dir))
  end
  -- 4. Held-out accuracy; the problems and the report next to the model.
  local eval, eval_seconds = held_out(opt, dir, test, log)
  sh("mkdir -p " .. q(dir .. "/data"))
  assert(mathgen.write_jsonl(dir .. "/data/train.jsonl", train))
  assert(mathgen.write_jsonl(dir .. "/data/test.jsonl", test))
  local report = {
    version = M.VERSION, options = opt, parameters = params, vocab_size = tok.vocab_size,
    accuracy = eval.accuracy, final_mismatch_rate = eval.final_mismatch_rate, loss_curve = curve,
    tool_calls = eval.tool_calls, train_seconds = train_seconds, eval_seconds = eval_seconds,
    seconds = rl.now() - t0, tokens_per_second = tokens / train_seconds, example = eval.example,
    -- shipped weights: where from, and the held-out accuracy on the host that trained them
    shipped = from and { dir = shipped, accuracy = from.accuracy } or nil,
  }
  local f = assert(io.open(dir .. "/warmup.json", "wb"))
  f:write(rl.json.encode(report, { indent = 2, sort_keys = true }), "\n")
  f:close()
  rl.torch.set_num_threads(threads_before)
  return report
end

--- Builds into a temporary sibling of dir and renames it into place (an existing
--- model directory at dir is replaced). Returns the report. shipped, only_shipped: as in M.build.
function M.build_into(opt, dir, shipped, only_shipped)
  local tmp = dir .. ".tmp-" .. os.tmpname():match("([^/]+)$")
  sh("mkdir -p " .. q(dir:match("^(.*)/[^/]*$") or "."))
  local ok, report = pcall(M.build, opt, tmp, shipped, only_shipped)
  if not ok then
    remove_tree(tmp)
    remove_tree(tmp .. ".tokenizer")
    error(report, 0)
  end
  local old
  if exists(dir .. "/config.json") then
    old = tmp .. ".old"
    assert(os.rename(dir, old))
  end
  local renamed, err = os.rename(tmp, dir)
  if old then remove_tree(old) end
  if not renamed then
    remove_tree(tmp)
    if not exists(dir .. "/config.json") then error("rl.mathgen.warmup: cannot rename into " .. dir .. ": " .. err) end
  end
  return report
end

--- The cache directory: $XDG_CACHE_HOME/rlhost, else ~/.cache/rlhost.
function M.cache_dir()
  local xdg = os.getenv("XDG_CACHE_HOME")
  if xdg and xdg ~= "" then return xdg .. "/rlhost" end
  return (os.getenv("HOME") or "/tmp") .. "/.cache/rlhost"
end

--- The shipped weights of a default model, `models/<entry>` in the rlhost tree (beside
--- lua/, in the source tree and installed alike): model.safetensors as this build trained
--- it (recipes/sft_warmup.lua, on the host models/README.md names), with the config,
--- tokenizer and report it was trained with. → the directory, or nil when not shipped.
function M.shipped_dir(entry)
  local tree = debug.getinfo(1, "S").source:match("^@(.*)/lua/rl/mathgen/[^/]*$")
  local dir = tree and tree .. "/models/" .. entry
  return dir and exists(dir .. "/model.safetensors") and dir or nil
end

--- The default model's directory, made when missing: from the shipped weights (seconds:
--- the data and tokenizer derived, the held-out accuracy measured on this host) where
--- they exist for these options, else trained (a few minutes on 2 cores). opts: cache_dir,
--- shipped = false (train even where weights are shipped), and any build option (which
--- then names another cache entry only when you give it another name: `name`).
function M.default_model(opts)
  opts = opts or {}
  local entry = opts.tools and ("default-math-tools-model-v" .. M.TOOLS_VERSION) or ("default-math-model-v" .. M.VERSION)
  local dir = (opts.cache_dir or M.cache_dir()) .. "/" .. (opts.name or entry)
  if exists(dir .. "/config.json") then return dir end
  local opt, as_shipped = M.defaults(opts.tools), opts.shipped ~= false
  for k, v in pairs(opts) do
    if k ~= "cache_dir" and k ~= "name" and k ~= "shipped" then
      if opt[k] == nil and k ~= "quiet" then error("rl.mathgen.default_model: unknown option '" .. tostring(k) .. "'", 2) end
      as_shipped = as_shipped and (NOT_TRAINING[k] or rl.json.encode(v) == rl.json.encode(opt[k]))
      opt[k] = v
    end
  end
  local shipped = as_shipped and M.shipped_dir(entry) or nil
  rl.log.info("building the default math%s model into %s (once; %s)", opts.tools and " tools" or "", dir,
    shipped and "from the shipped weights, seconds" or "a few minutes")
  local report = M.build_into(opt, dir, shipped)
  rl.log.info("default math model: %.2fM parameters, held-out accuracy %.2f (greedy), %s in %.0f s",
    report.parameters / 1e6, report.accuracy.greedy, report.shipped and "made from the shipped weights" or "built",
    report.seconds)
  return dir
end

return M
