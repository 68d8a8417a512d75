-- rl.tokenizer: encode/decode/chat template against the HF references in tests/data;
-- bad paths are nil, err; misuse raises.
local rl = require "rl"

local QWEN3 = test_data("tokenizers/qwen")
local STORIES = test_data("models/stories260K")

local cache = {}
local function load(dir)
  if not cache[dir] then cache[dir] = assert(rl.tokenizer.load(dir)) end
  return cache[dir]
end

local function rows(file)
  local out = {}
  for line in io.lines(file) do
    if line ~= "" then out[#out + 1] = rl.json.decode(line) end
  end
  return out
end

local function plain(t)  -- drop the rl.json array metatable for eq()
  local out = {}
  for i, v in ipairs(t) do out[i] = v end
  return out
end

describe("rl.tokenizer", function()
  it("loads Qwen3 and exposes its special tokens", function()
    local tok = load(QWEN3)
    eq(tok.vocab_size, 151669)
    eq(tok.bos_token_id, nil)
    eq(tok.eos_token_ids, { 151645 })
    eq(tok.pad_token_id, 151643)
    eq(tok.has_chat_template, true)
    eq(tok:token_to_id("<|im_start|>"), 151644)
    eq(tok:id_to_token(9707), "Hello")
    eq(tok:token_to_id("no such token"), nil)
    eq(tok:id_to_token(-1), nil)
    ok(tostring(tok):find("151669 tokens", 1, true))
  end)

  it("encodes and decodes every Qwen3 reference row", function()
    local tok = load(QWEN3)
    local n = 0
    for _, row in ipairs(rows(QWEN3 .. "/reference_encodings.jsonl")) do
      local ids = tok:encode(row.text, { add_special_tokens = false })
      eq(ids, plain(row.ids), row.text)
      n = n + 1
    end
    ok(n > 100)
    eq(tok:decode({ 9707, 11, 1879, 0 }), "Hello, world!")
    eq(tok:decode({ 151644, 9707, 151645 }, { skip_special_tokens = true }), "Hello")
    eq(tok:decode({ 151644, 9707 }), "<|im_start|>Hello")
    eq(tok:decode({}), "")
  end)

  it("stories260K adds BOS and decodes without it", function()
    local tok = load(STORIES)
    eq(tok.bos_token_id, 1)
    eq(tok.eos_token_ids, { 2 })
    eq(tok:encode("Once upon a time"), { 1, 403, 407, 261, 378 })
    eq(tok:encode("Once upon a time", { add_special_tokens = false }), { 403, 407, 261, 378 })
    eq(tok:decode({ 1, 403, 407, 261, 378 }, { skip_special_tokens = true }), "Once upon a time")
  end)

  it("streams text without splitting characters", function()
    local tok = load(QWEN3)
    local text = "caf\195\169 \228\189\160\229\165\189 \240\159\152\128!"
    local ids = tok:encode(text)
    local dec = tok:decoder()
    local out = {}
    for _, id in ipairs(ids) do out[#out + 1] = dec:push(id) end
    out[#out + 1] = dec:finish()
    eq(table.concat(out), text)
    for _, piece in ipairs(out) do ok(rl.json.decode(rl.json.encode(piece)) == piece, "valid UTF-8 piece") end
  end)

  it("renders the Qwen3 chat template like transformers", function()
    local tok = load(QWEN3)
    local n = 0
    for _, row in ipairs(rows(QWEN3 .. "/reference_encodings.jsonl")) do
      if row.messages then
        local opts = {}
        for k, v in pairs(row.template_kwargs or {}) do opts[k] = v end
        eq(tok:apply_chat_template(row.messages, opts), row.text)
        opts.tokenize = true
        eq(tok:apply_chat_template(row.messages, opts), plain(row.ids))
        n = n + 1
      end
    end
    ok(n >= 10)
    local text = tok:apply_chat_template({ { role = "user", content = "Hi" } },
      { add_generation_prompt = true, enable_thinking = false })
    eq(text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
  end)

  it("runtime failures are nil, err", function()
    local tok, err = rl.tokenizer.load("/nonexistent/model")
    eq(tok, nil)
    ok(err:find("/nonexistent/model", 1, true), err)
    local dir = os.tmpname()
    local f = assert(io.open(dir, "w"))
    f:write('{"model": {"type": "Unigram", "vocab": []}}')
    f:close()
    tok, err = rl.tokenizer.load(dir)
    os.remove(dir)
    eq(tok, nil)
    ok(err:find("'Unigram' is not a supported model type", 1, true), err)
    local stories = load(STORIES)  -- no chat template
    eq(stories.has_chat_template, false)
    local text, terr = stories:apply_chat_template({ { role = "user", content = "x" } })
    eq(text, nil)
    ok(terr:find("no chat template", 1, true), terr)
  end)

  it("misuse raises", function()
    local tok = load(STORIES)
    raises(function() rl.tokenizer.load(3) end, "rl.tokenizer.load: bad argument #1 'path'")
    raises(function() tok:encode(nil) end, "bad argument #1 'text'")
    raises(function() tok:encode("x", { add_special_tokens = 1 }) end, "opts.add_special_tokens")
    raises(function() tok:decode({ 1, "x" }) end, "array of integer token ids expected")
    raises(function() tok:decode({ 1.5 }) end, "array of integer token ids expected")
    raises(function() tok:apply_chat_template("hi") end, "bad argument #1 'messages'")
    raises(function() tok:decoder():push("a") end, "rl.tokenizer.Decoder:push")
  end)
end)
