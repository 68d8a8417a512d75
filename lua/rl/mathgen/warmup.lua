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

local M = {}

--- Bump when the defaults or the code change what build writes: it names the cache entry.
M.VERSION = 2

--- The build options as an rl.args spec (appended to spec when given); the defaults
--- are the default model's.
function M.options(spec)
  spec = spec or {}
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
  } do spec[#spec + 1] = o end
  return spec
end

--- The default options (what `options()` declares).
function M.defaults()
  local d = {}
  for _, o in ipairs(M.options()) do d[o.name] = o.default end
  return d
end

local function sh(cmd)
  if not os.execute(cmd) then error("command failed: " .. cmd, 2) end
end
local function q(path) return "'" .. path:gsub("'", "'\\''") .. "'" end
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

--- Builds the model into dir (created; must not exist) and returns the report
--- that is also written to dir/warmup.json.
function M.build(opt, dir)
  local t0 = rl.now()
  local log = opt.quiet and function() end or function(...) rl.log.info(...) end
  local threads_before = rl.torch.info().num_threads
  rl.torch.set_num_threads(opt.threads)
  rl.torch.manual_seed(opt.seed)

  -- 1. Problems: a training split and a held-out split.
  local train, test = mathgen.splits { seed = opt.seed, train = opt.train_size, test = opt.test_size,
    max_number = opt.max_number, max_factor = opt.max_factor, steps = opt.step_weights }

  -- 2. A tokenizer derived from the training texts as the model will see them (the
  --    ChatML rendering of rl.model.byte_tokenizer's template).
  local chat = {}
  for i, p in ipairs(train) do
    chat[i] = "<|im_start|>user\n" .. p.question .. "<|im_end|>\n<|im_start|>assistant\n" .. p.answer .. "<|im_end|>"
  end
  local tok_dir = dir .. ".tokenizer"
  sh("mkdir -p " .. q(tok_dir))
  local tj, tc = mtok.derive(chat, { max_merges = opt.max_merges, max_length = opt.max_position_embeddings })
  assert(mtok.save(tok_dir, tj, tc))
  local tok = assert(rl.tokenizer.load(tok_dir))

  -- 3. A random Llama over that vocabulary.
  local config = {
    architectures = { "LlamaForCausalLM" }, model_type = "llama", vocab_size = tok.vocab_size,
    hidden_size = opt.hidden_size, intermediate_size = opt.intermediate_size, num_hidden_layers = opt.num_layers,
    num_attention_heads = opt.num_heads, num_key_value_heads = opt.num_heads,
    max_position_embeddings = opt.max_position_embeddings, rms_norm_eps = 1e-5, rope_theta = 10000,
    tie_word_embeddings = false, eos_token_id = tok.eos_token_ids[1], pad_token_id = tok.pad_token_id,
  }
  assert(rl.model.init { config = config, seed = opt.seed, dir = dir, tokenizer = tok_dir })
  sh("rm -rf " .. q(tok_dir))

  -- 4. SFT: the loss on the answer tokens only, a cosine schedule.
  local tr = rl.trainer.new {
    model = dir, loss = { loss_type = "sft_loss" }, micro_batch_size = opt.micro_batch_size,
    optimizer = { lr = opt.lr, min_lr = opt.min_lr, lr_decay_style = "cosine", lr_decay_iters = opt.steps,
                  lr_warmup_iters = opt.warmup_steps, weight_decay = opt.weight_decay, clip_grad = 1.0,
                  adam_beta2 = 0.98 },
  }
  local params = tr.model:num_parameters()
  log("sft_warmup: %d train / %d test problems, vocab %d, %.2fM parameters", #train, #test, tok.vocab_size,
    params / 1e6)
  -- Noisy labels, as in scraped data: a share of the answers work the problem
  -- right but end on a wrong "#### N" line. The warm model learns that habit and
  -- GRPO, rewarded on the final line only, has a real behaviour to correct.
  local seqs, noise = {}, rl.pyrandom.new(opt.seed * 7919 + 17)
  for i, p in ipairs(train) do
    if noise:random() < opt.final_noise then p = M.noisy(p, noise) end
    local prompt, answer = M.encode(tok, p)
    for _, id in ipairs(answer) do prompt[#prompt + 1] = id end
    seqs[i] = { tokens = prompt, n = #answer }
  end
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
      local mask = {}
      for j = 1, s.n do mask[j] = 1 end
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
  local train_seconds = rl.now() - t_train
  assert(tr:save_model(dir))

  -- 5. Held-out accuracy, greedy and at temperature 1 (GRPO samples there).
  local t_eval = rl.now()
  local eopt = { threads = opt.threads, max_new_tokens = opt.max_new_tokens, seed = opt.seed }
  eopt.temperature = 0
  local acc0, texts = M.evaluate(dir, test, eopt)
  eopt.temperature = 1
  local acc1, texts1 = M.evaluate(dir, test, eopt)
  local mis0, mis1 = M.final_mismatch_rate(texts), M.final_mismatch_rate(texts1)
  log("held-out accuracy: %.3f greedy, %.3f at temperature 1 (%d problems); final line off its working: %.2f, %.2f",
    acc0, acc1, #test, mis0, mis1)

  sh("mkdir -p " .. q(dir .. "/data"))
  assert(mathgen.write_jsonl(dir .. "/data/train.jsonl", train))
  assert(mathgen.write_jsonl(dir .. "/data/test.jsonl", test))
  local report = {
    version = M.VERSION, options = opt, parameters = params, vocab_size = tok.vocab_size,
    accuracy = { greedy = acc0, temperature_1 = acc1, problems = #test },
    final_mismatch_rate = { greedy = mis0, temperature_1 = mis1 }, loss_curve = curve,
    train_seconds = train_seconds, eval_seconds = rl.now() - t_eval, seconds = rl.now() - t0,
    tokens_per_second = tokens / train_seconds, example = { question = test[1].question, response = texts[1] },
  }
  local f = assert(io.open(dir .. "/warmup.json", "wb"))
  f:write(rl.json.encode(report, { indent = 2, sort_keys = true }), "\n")
  f:close()
  rl.torch.set_num_threads(threads_before)
  return report
end

--- Builds into a temporary sibling of dir and renames it into place (an existing
--- model directory at dir is replaced). Returns the report.
function M.build_into(opt, dir)
  local tmp = dir .. ".tmp-" .. os.tmpname():match("([^/]+)$")
  sh("mkdir -p " .. q(dir:match("^(.*)/[^/]*$") or "."))
  local ok, report = pcall(M.build, opt, tmp)
  if not ok then
    os.execute("rm -rf " .. q(tmp) .. " " .. q(tmp .. ".tokenizer"))
    error(report, 0)
  end
  local old
  if exists(dir .. "/config.json") then
    old = tmp .. ".old"
    assert(os.rename(dir, old))
  end
  local renamed, err = os.rename(tmp, dir)
  if old then os.execute("rm -rf " .. q(old)) end
  if not renamed then
    os.execute("rm -rf " .. q(tmp))
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

--- The default model's directory, built (a few minutes on 2 cores) when missing.
--- opts: cache_dir, and any build option (which then names another cache entry only
--- when you give it another name: `name`).
function M.default_model(opts)
  opts = opts or {}
  local dir = (opts.cache_dir or M.cache_dir()) .. "/" .. (opts.name or ("default-math-model-v" .. M.VERSION))
  if exists(dir .. "/config.json") then return dir end
  local opt = M.defaults()
  for k, v in pairs(opts) do
    if k ~= "cache_dir" and k ~= "name" then
      if opt[k] == nil and k ~= "quiet" then error("rl.mathgen.default_model: unknown option '" .. tostring(k) .. "'", 2) end
      opt[k] = v
    end
  end
  rl.log.info("building the default math model into %s (once; a few minutes)", dir)
  local report = M.build_into(opt, dir)
  rl.log.info("default math model: %.2fM parameters, held-out accuracy %.2f (greedy), built in %.0f s",
    report.parameters / 1e6, report.accuracy.greedy, report.seconds)
  return dir
end

return M
