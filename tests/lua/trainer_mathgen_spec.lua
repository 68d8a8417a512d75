-- rl.mathgen: the generated GSM8K-format problems (deterministic, correct, disjoint
-- splits), the derived tokenizer (exact round trips, single-digit tokens, HF parity
-- when Python's `tokenizers` is installed), and the warm-up build on a tiny model
-- (the SFT loss falls, the output is an ordinary model directory, same seed → same
-- weights, the cache builds once).
local rl = require "rl"
local mathgen = require "rl.mathgen"
local mtok = require "rl.mathgen.tokenizer"
local warmup = require "rl.mathgen.warmup"
local read = read_file  -- spec.lua helpers

local OPS = {
  ["+"] = function(a, b) return a + b end, ["-"] = function(a, b) return a - b end,
  ["*"] = function(a, b) return a * b end, ["/"] = function(a, b) return a / b end,
}

local function chat(p)
  return "<|im_start|>user\n" .. p.question .. "<|im_end|>\n<|im_start|>assistant\n" .. p.answer .. "<|im_end|>"
end

-- Tiny build options: seconds, not minutes.
local function tiny(over)
  local o = warmup.defaults()
  for k, v in pairs { train_size = 200, test_size = 8, hidden_size = 32, intermediate_size = 64, num_layers = 2,
                      num_heads = 2, steps = 30, batch_size = 8, micro_batch_size = 8, lr = 1e-2, warmup_steps = 3,
                      max_new_tokens = 24, threads = 1, log_every = 10, quiet = true, max_merges = 100 } do
    o[k] = v
  end
  for k, v in pairs(over or {}) do o[k] = v end
  return o
end

describe("rl.mathgen", function()
  it("generates the same problems for a seed, with worked answers that add up", function()
    local a, b = mathgen.dataset { seed = 7, n = 400 }, mathgen.dataset { seed = 7, n = 400 }
    eq(a, b)
    ok(mathgen.dataset({ seed = 8, n = 5 })[1].question ~= a[1].question, "another seed, other problems")
    local seen_steps = {}
    for _, p in ipairs(a) do
      local last, n = nil, 0
      for x, op, y, z in p.answer:gmatch("(%d+)([%+%-%*/])(%d+)=%$?(%d+)") do
        eq(OPS[op](tonumber(x), tonumber(y)), tonumber(z), p.answer)
        ok(p.question:find(x, 1, true) or p.answer:find("=%$?" .. x .. "%D"), "operand " .. x .. " comes from somewhere")
        last, n = tonumber(z), n + 1
      end
      eq(n, p.steps, p.answer)
      eq(tonumber(p.answer:match("\n#### (%d+)$")), last, p.answer)
      eq(p.value, last)
      eq(rl.rewards.gsm8k.target(p.answer), last)
      ok(last >= 0 and not p.question:find("%d%.%d"), "non-negative integers only")
      seen_steps[p.steps] = true
    end
    eq(seen_steps, { true, true, true })
    local easy = mathgen.dataset { seed = 7, n = 50, steps = { 1, 0, 0 }, max_number = 5, max_factor = 3 }
    for _, p in ipairs(easy) do
      eq(p.steps, 1)
      for d in p.answer:gmatch("%d+") do ok(tonumber(d) <= 25, p.answer) end
    end
    raises(function() mathgen.dataset { max_numbr = 3 } end, "unknown option 'max_numbr'")
  end)

  it("splits train and held-out test without overlap and writes GSM8K JSONL", function()
    local train, test = mathgen.splits { seed = 3, train = 2000, test = 300, max_number = 8, max_factor = 4 }
    eq(#train, 2000)
    eq(#test, 300)
    local seen = {}
    for _, p in ipairs(train) do seen[p.question] = true end
    for _, p in ipairs(test) do
      ok(not seen[p.question], "test question seen in train: " .. p.question)
      seen[p.question] = true
    end
    local dir = tmpdir()
    os.execute("mkdir -p " .. dir)
    assert(mathgen.write_jsonl(dir .. "/test.jsonl", test))
    local i = 0
    for line in io.lines(dir .. "/test.jsonl") do
      i = i + 1
      eq(line:sub(1, 14), '{"question": "')
      eq(rl.json.decode(line), { question = test[i].question, answer = test[i].answer })
    end
    eq(i, 300)
    os.execute("rm -rf " .. dir)
  end)

  -- One derived tokenizer for the two tests below: (its folder, the texts it must encode).
  local derived
  local function derive()
    if derived then return derived.dir, derived.all end
    local train, test = mathgen.splits { seed = 5, train = 1500, test = 300 }
    local texts = {}
    for i, p in ipairs(train) do texts[i] = chat(p) end
    local tj, tc = mtok.derive(texts, { max_merges = 1000 })
    eq(mtok.derive(texts, { max_merges = 1000 }), tj, "deterministic")
    local dir = tmpdir()
    os.execute("mkdir -p " .. dir)
    assert(mtok.save(dir, tj, tc))
    local all = {}
    for _, p in ipairs(train) do all[#all + 1] = chat(p) end
    for _, p in ipairs(test) do all[#all + 1] = p.question; all[#all + 1] = p.answer end
    all[#all + 1] = "Unseen words, 12345 digits, tabs\t and ünïcödé 🙂 still round-trip."
    derived = { dir = dir, all = all }
    return dir, all
  end

  it("derives a tokenizer that round-trips every text and keeps digits single", function()
    local dir, all = derive()
    local tok = assert(rl.tokenizer.load(dir))
    ok(tok.vocab_size > 300 and tok.vocab_size < 1300, "a small vocabulary: " .. tok.vocab_size)
    eq(tok:id_to_token(tok.eos_token_ids[1]), "<|im_end|>")
    ok(tok.has_chat_template)
    local multi = 0
    for _, t in ipairs(all) do
      local ids = tok:encode(t)
      eq(tok:decode(ids), t)
      for _, id in ipairs(ids) do
        local s = tok:id_to_token(id)
        if s:find("%d") and #s > 1 then multi = multi + 1 end
      end
    end
    eq(multi, 0, "tokens holding a digit and something else")
    -- the words of the corpus became single tokens
    local ids = tok:encode("How many apples does Tom have?")
    ok(#ids <= 8, "word-level tokens: " .. #ids)
  end, { timeout = 120 })

  it("HF tokenizers reads the derived tokenizer.json and gives the same ids", function()
    local dir, all = derive()
    local tok = assert(rl.tokenizer.load(dir))
    local probe = io.popen("python3 -c 'import tokenizers' 2>&1 && echo yes")
    local out = probe:read("*a")
    probe:close()
    if not out:find("yes") then
      os.execute("rm -rf " .. dir)
      local last = out:gsub("%s+$", ""):match("([^\n]*)$")
      skip("python3 cannot import tokenizers (HF parity): " .. last,
        "pip install tokenizers==0.23.3, or scripts/bootstrap.sh --test-deps")
    end
    local f = assert(io.open(dir .. "/texts.json", "wb"))
    f:write(rl.json.encode({ unpack(all, 1, 200) }))
    f:close()
    local py = io.popen(("python3 -c 'import json,tokenizers; t=tokenizers.Tokenizer.from_file(\"%s/tokenizer.json\"); "
      .. "print(json.dumps([t.encode(s).ids for s in json.load(open(\"%s/texts.json\"))]))'"):format(dir, dir))
    local theirs = rl.json.decode(py:read("*a"))
    py:close()
    eq(#theirs, 200)
    for i = 1, 200 do eq(tok:encode(all[i]), theirs[i], all[i]) end
    os.execute("rm -rf " .. dir)
  end, { timeout = 120 })

  it("makes noisy final lines that are wrong but keep the working, and measures them", function()
    local r = rl.pyrandom.new(5)
    local by_steps = {}
    for _ = 1, 300 do
      local p = mathgen.problem(r)
      local n = warmup.noisy(p, r)
      eq(n.question, p.question)
      local body, final = n.answer:match("^(.*)\n#### (%d+)$")
      eq(body, p.answer:match("^(.*)\n#### %d+$"), "the working is kept")
      ok(tonumber(final) ~= p.value and tonumber(final) >= 0, "the final line is wrong: " .. n.answer)
      local first = tonumber(p.answer:match("=%$?(%d+)"))
      if p.steps > 1 and first ~= p.value then
        eq(tonumber(final), first, "multi-step: the first line's result")
      else
        ok(math.abs(tonumber(final) - p.value) <= 3, "off by 1 to 3: " .. n.answer)
      end
      by_steps[p.steps] = true
    end
    ok(by_steps[1] and by_steps[2] and by_steps[3])
    eq(warmup.final_mismatch_rate { "a 2+3=5.\n#### 5", "2*3=6. 6+1=7.\n#### 6", "#### 4", "x 4-1=$3\n#### 3" }, 0.25)
    eq(warmup.final_mismatch_rate {}, 0)
  end)

  -- The default model ships its SFT weights (models/default-math-model-v<N>): a first run
  -- takes them instead of training for minutes. They are only valid for the data, the
  -- tokenizer and the config this build derives; a change to any of those must fail here.
  it("makes the default model from the shipped weights: this build's tokenizer and config, its held-out accuracy", function()
    local entry = "default-math-model-v" .. warmup.VERSION
    local shipped = warmup.shipped_dir(entry)
    ok(shipped, "models/" .. entry .. " is in the tree (rlhost recipes/sft_warmup.lua --out models/" .. entry .. ")")
    local dir = tmpdir() .. "/m"
    local t0 = rl.now()
    local report = warmup.build_into(warmup.defaults(), dir, shipped, true)
    local secs = rl.now() - t0
    eq(read(dir .. "/model.safetensors"), read(shipped .. "/model.safetensors"))
    for _, f in ipairs { "config.json", "tokenizer.json", "tokenizer_config.json" } do
      eq(read(dir .. "/" .. f), read(shipped .. "/" .. f), f)
    end
    local trained = rl.json.decode(read(shipped .. "/warmup.json"))
    eq(report.shipped.accuracy, trained.accuracy)
    eq(report.parameters, trained.parameters)
    eq(report.loss_curve, trained.loss_curve)
    -- the same weights on another CPU round differently; on the kind that trained them
    -- the accuracy is the recorded one, elsewhere within a few problems of it
    ok(math.abs(report.accuracy.greedy - trained.accuracy.greedy) <= 0.02,
      ("greedy held-out accuracy %.3f here, %.3f where trained"):format(report.accuracy.greedy, trained.accuracy.greedy))
    local lines = 0
    for _ in read(dir .. "/data/test.jsonl"):gmatch("\n") do lines = lines + 1 end
    eq(lines, report.options.test_size)
    -- rl.mathgen.default_model takes the same path into its cache
    local cache = tmpdir()
    eq(rl.mathgen.default_model { cache_dir = cache, quiet = true }, cache .. "/" .. entry)
    eq(read(cache .. "/" .. entry .. "/model.safetensors"), read(shipped .. "/model.safetensors"))
    print(("default model from the shipped weights: %.1f s, held-out %.3f greedy (%.3f where trained)"):format(
      secs, report.accuracy.greedy, trained.accuracy.greedy))
    os.execute("rm -rf '" .. dir .. "' '" .. cache .. "'")
  end, { timeout = 120 })

  it("trains instead when the options or the tokenizer differ from the shipped weights'", function()
    local shipped = warmup.shipped_dir("default-math-model-v" .. warmup.VERSION)
    local opt = tiny()
    local dir = tmpdir() .. "/m"
    local okk, err = pcall(warmup.build_into, opt, dir, shipped, true)
    ok(not okk and tostring(err):find("trained with %-%-", 1) ~= nil, tostring(err))
    ok(not io.open(dir .. "/config.json"), "nothing left behind")
    -- the default options, but weights shipped for another tokenizer
    local other = tmpdir(true)
    os.execute("cp '" .. shipped .. "'/* '" .. other .. "'/")
    local f = assert(io.open(other .. "/tokenizer.json", "ab"))
    f:write(" ")
    f:close()
    okk, err = pcall(warmup.build_into, warmup.defaults(), dir, other, true)
    ok(not okk and tostring(err):find("tokenizer.json differs", 1, true) ~= nil, tostring(err))
    ok(not io.open(dir .. "/config.json"), "nothing left behind")
    os.execute("rm -rf '" .. other .. "'")
    local report = warmup.build_into(opt, dir, shipped)
    eq(report.shipped, nil)
    ok(report.loss_curve[#report.loss_curve].loss < report.loss_curve[1].loss)
    os.execute("rm -rf '" .. dir .. "'")
  end, { timeout = 120 })

  it("builds a tiny warm model whose SFT loss falls, deterministically, and caches it", function()
    local dir = tmpdir()
    local t0 = rl.now()
    local report = warmup.build_into(tiny(), dir)
    local secs = rl.now() - t0
    local first, last = report.loss_curve[1].loss, report.loss_curve[#report.loss_curve].loss
    ok(last < first * 0.6, ("sft loss %.3f -> %.3f"):format(first, last))
    for _, f in ipairs { "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                         "data/train.jsonl", "data/test.jsonl", "warmup.json" } do
      ok(io.open(dir .. "/" .. f), f .. " written")
    end
    local m = assert(rl.model.load(dir))
    eq(m:num_parameters(), report.parameters)
    -- the reported held-out figures are the saved model's: greedy decoding of the same
    -- held-out problems gives the same accuracy and the same final-line mismatch rate
    local o = report.options
    local _, test = mathgen.splits { seed = o.seed, train = o.train_size, test = o.test_size,
      max_number = o.max_number, max_factor = o.max_factor, steps = o.step_weights }
    eq(report.accuracy.problems, #test)
    local acc, texts = warmup.evaluate(dir, test, { threads = o.threads, max_new_tokens = o.max_new_tokens,
      seed = o.seed, temperature = 0 })
    eq(report.accuracy.greedy, acc, "greedy accuracy of the saved model")
    eq(report.final_mismatch_rate.greedy, warmup.final_mismatch_rate(texts))
    eq(rl.json.decode(read(dir .. "/warmup.json")).parameters, report.parameters)
    print(("tiny warm-up: loss %.3f -> %.3f, %.1f s"):format(first, last, secs))
    -- the cache: built once with the same code, the same bytes for the same seed
    local cache = tmpdir()
    local over = tiny()
    over.cache_dir, over.name = cache, "tiny"
    local cached = rl.mathgen.default_model(over)
    eq(cached, cache .. "/tiny")
    eq(read(cached .. "/model.safetensors"), read(dir .. "/model.safetensors"))
    eq(read(cached .. "/tokenizer.json"), read(dir .. "/tokenizer.json"))
    -- the second call uses the cache: it builds nothing (a build would replace the files)
    os.execute("touch -d '2001-01-01' '" .. cached .. "/model.safetensors'")
    local before = io.popen("stat -c %Y '" .. cached .. "/model.safetensors'"):read("*a")
    eq(rl.mathgen.default_model(over), cached)
    eq(io.popen("stat -c %Y '" .. cached .. "/model.safetensors'"):read("*a"), before, "not rebuilt")
    local left = io.popen("ls " .. cache):read("*a")
    eq(left, "tiny\n", "no temporary directories left")
    os.execute("rm -rf " .. dir .. " " .. cache)
  end, { timeout = 120 })
end)
