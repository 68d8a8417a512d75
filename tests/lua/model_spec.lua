-- rl.model: load/init/use a transformer from Lua; bad files are nil, err; misuse raises.
local rl = require "rl"

local STORIES = test_data("models/stories260K")

local TINY = {
  architectures = { "Qwen3ForCausalLM" }, model_type = "qwen3", vocab_size = 300, hidden_size = 32,
  intermediate_size = 48, num_hidden_layers = 2, num_attention_heads = 4, num_key_value_heads = 2, head_dim = 8,
  max_position_embeddings = 64, rms_norm_eps = 1e-6,
}

describe("rl.model", function()
  it("loads stories260K and exposes its config", function()
    local m = assert(rl.model.load(STORIES))
    eq(m.config.hidden_size, 64)
    eq(m.config.num_key_value_heads, 4)
    eq(m.config.tie_word_embeddings, true)
    eq(m:num_parameters(), 260032)  -- tied: the embedding counts once
    ok(tostring(m):find("LlamaForCausalLM", 1, true))
    local params = m:parameters()
    eq(#params, 47)
    eq(params[1].name, "model.embed_tokens.weight")
    eq(params[1].shape[1], 512)
  end)

  it("greedy generation continues the reference story", function()
    local m = assert(rl.model.load(STORIES))
    local ids = m:generate({ 1 }, { max_new_tokens = 8 })
    eq(#ids, 8)
    local f = assert(io.open(STORIES .. "/reference_outputs.json"))
    local ref = rl.json.decode(f:read("*a"))
    f:close()
    for i = 1, 8 do eq(ids[i], ref.greedy.ids[i + 1]) end
  end)

  it("log-probs are the log-softmax of the logits", function()
    local m = assert(rl.model.load(STORIES))
    local ids = { 1, 365, 191, 260 }
    local lp = m:logprobs(ids)
    local logits = m:logits(ids)
    eq(#lp, 3)
    for t = 1, 3 do
      local row, mx, sum = logits[t], -math.huge, 0
      for _, v in ipairs(row) do mx = math.max(mx, v) end
      for _, v in ipairs(row) do sum = sum + math.exp(v - mx) end
      local want = row[ids[t + 1] + 1] - mx - math.log(sum)
      ok(math.abs(lp[t] - want) < 1e-4, ("position %d: %g vs %g"):format(t, lp[t], want))
    end
  end)

  it("init writes a model directory with a tokenizer that loads back", function()
    local dir = assert(rl.model.init { config = TINY, seed = 4, dir = tmpdir() })
    for _, f in ipairs { "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json" } do
      ok(io.open(dir .. "/" .. f), "missing " .. f)
    end
    local tok = assert(rl.tokenizer.load(dir))
    eq(tok:encode("Hi 7"), { 72, 105, 32, 55 })  -- ids are byte values
    eq(tok:apply_chat_template({ { role = "user", content = "2+2?" } }, { add_generation_prompt = true }),
      "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n")
    local a, b = assert(rl.model.load(dir)), assert(rl.model.load(dir, { dtype = "bfloat16" }))
    eq(a.config.head_dim, 8)
    eq(#a:generate({ 1, 2, 3 }, { max_new_tokens = 4, stop_token_ids = {} }), 4)
    eq(#b:logprobs({ 1, 2, 3 }), 2)
    -- same seed, same weights
    local again = assert(rl.model.load(assert(rl.model.init { config = TINY, seed = 4, dir = tmpdir() })))
    eq(again:logprobs({ 5, 6, 7 })[2], a:logprobs({ 5, 6, 7 })[2])
    local saved = tmpdir()
    assert(a:save(saved, { max_shard_bytes = 20000 }))
    ok(io.open(saved .. "/model.safetensors.index.json"), "sharded save writes an index")
    eq(assert(rl.model.load(saved)):logprobs({ 5, 6, 7 })[1], a:logprobs({ 5, 6, 7 })[1])
  end)

  it("bad files are nil, err naming the file", function()
    local m, err = rl.model.load("/nonexistent/model")
    eq(m, nil)
    ok(err:find("/nonexistent/model", 1, true), err)
    local dir = tmpdir()
    assert(rl.model.init { config = TINY, dir = dir })
    local f = assert(io.open(dir .. "/model.safetensors", "r+b"))
    local size = f:seek("end")
    f:close()
    -- truncate the weights file
    local data = assert(io.open(dir .. "/model.safetensors", "rb")):read(size - 100)
    local w = assert(io.open(dir .. "/model.safetensors", "wb"))
    w:write(data)
    w:close()
    m, err = rl.model.load(dir)
    eq(m, nil)
    ok(err:find("model.safetensors", 1, true), err)
    local bad = rl.json.decode(rl.json.encode(TINY))
    bad.num_key_value_heads = 3
    m, err = rl.model.init { config = bad, dir = tmpdir() }
    eq(m, nil)
    ok(err:find("num_key_value_heads", 1, true), err)
  end)

  it("load_async loads on a helper thread (from a task); a bad path is nil, err", function()
    local m, lp, err, bad
    rl.spawn(function()
      m = assert(rl.model.load_async(STORIES))
      lp = m:logprobs({ 1, 365, 191, 260 })
      bad, err = rl.model.load_async("/nonexistent/model")
    end):wait()
    eq(m.config.hidden_size, 64)
    local want = assert(rl.model.load(STORIES)):logprobs({ 1, 365, 191, 260 })
    for t = 1, 3 do eq(lp[t], want[t]) end   -- the same weights: bit for bit
    eq(bad, nil)
    ok(err:find("/nonexistent/model", 1, true), err)
    local okc, e = pcall(rl.model.load_async, 42)
    ok(not okc and e:find("bad argument #1 'path'", 1, true), e)
  end)

  it("misuse raises with the argument named", function()
    raises(function() rl.model.load(42) end, "rl.model.load: bad argument #1 'path' (string expected, got number)")
    local m = assert(rl.model.load(STORIES))
    raises(function() m:logprobs({ 1 }) end, "at least 2 token ids")
    raises(function() m:generate({ 1, "x" }) end, "element 2 is not a number")
    raises(function() m:logits({ 1, 9999 }) end, "token id 9999 outside the vocabulary [0, 512)")
    raises(function() rl.model.init("x") end, "rl.model.init: bad argument #1 'opts'")
  end)
end)
