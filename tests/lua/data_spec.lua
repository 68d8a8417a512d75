-- rl.pyrandom (against Python's random), rl.sample, rl.data (GSM8K, slicing,
-- chat templates, epochs, exact resume, bad rows).
local rl = require "rl"
local json = rl.json
local sample = require "rl.sample"
local pyrandom = require "rl.pyrandom"

local function python(code)
  local p = assert(io.popen("python3 -c '" .. code .. "'"))
  local out = p:read("*a")
  p:close()
  return out
end
local function tmpfile(name, text)
  local path = os.tmpname() .. name
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  return path
end

describe("rl.pyrandom is Python's random", function()
  it("draws and shuffles like random.Random(seed) for small and large seeds", function()
    for _, seed in ipairs { 0, 1, 42, 2 ^ 32 + 7, 123456789012 } do
      local r = pyrandom.new(seed)
      local mine = {}
      for i = 1, 5 do mine[i] = ("%.17g"):format(r:random()) end
      local t = {}
      for i = 1, 100 do t[i] = i - 1 end
      pyrandom.new(seed):shuffle(t)
      local theirs = python(("import random\nr=random.Random(%d)\nprint(\" \".join(repr(r.random()) for _ in range(5)))\nt=list(range(100)); random.Random(%d).shuffle(t); print(\" \".join(map(str,t)))"):format(seed, seed))
      local l1, l2 = theirs:match("([^\n]*)\n([^\n]*)")
      local py = {}
      for x in l1:gmatch("%S+") do py[#py + 1] = tonumber(x) end
      for i = 1, 5 do eq(tonumber(mine[i]), py[i], "random() #" .. i .. " seed " .. seed) end
      eq(table.concat(t, " "), l2, "shuffle, seed " .. seed)
    end
  end)
  it("rejects bad seeds", function()
    raises(function() pyrandom.new(1.5) end, "seed")
  end)
end)

describe("rl.sample", function()
  it("has slime's defaults, appends responses and maps finish reasons to status", function()
    local s = sample.new { prompt = "p", label = "l", group_index = 3, index = 7 }
    eq(s.status, "pending")
    eq(s.response_length, 0)
    eq(s.reward, nil)
    s.tokens = json.array { 1, 2 }
    s:append_response({ 5, 6 }, { -0.5, -0.25 }, { text = "ab", meta_info = {
      finish_reason = { type = "stop" }, weight_version = 4, cached_tokens = 1, prompt_tokens = 2 } })
    eq(s.status, "completed")
    eq(s.tokens, { 1, 2, 5, 6 })
    eq(s.loss_mask, { 1, 1 })
    eq(s.weight_versions, { "4" })
    eq(s:prefix_cache_hit_rate(), 0.5)
    s:append_response({ 9 }, nil, { trainable = false, meta_info = { finish_reason = { type = "length" } } })
    eq(s.loss_mask, { 1, 1, 0 })
    eq(s.rollout_log_probs, { -0.5, -0.25, 0 })
    eq(s.status, "truncated")
    eq(s:effective_response_length(), 2)
    raises(function() s:append_response({ 1 }, nil) end, "need their log-probs")
    raises(function() sample.new { status = "done" } end, "not one of")
  end)
  it("keeps the weight version of every response token across a swap mid-request", function()
    local s = sample.new { prompt = "p" }
    s:append_response({ 1, 2, 3 }, { -1, -1, -1 }, { meta_info = { finish_reason = { type = "stop" },
      weight_version = "3", completion_tokens = 3, weight_version_spans = { { 0, "3" } } } })
    s:append_response({ 7 }, nil, { trainable = false })  -- a tool's output: no version
    -- the second request: 2 tokens streamed under v3, then a swap, 2 under v4
    s:append_response({ 4, 5 }, { -1, -1 })
    s:append_response({ 6, 8 }, { -1, -1 }, { meta_info = { finish_reason = { type = "length" },
      weight_version = "4", completion_tokens = 4, weight_version_spans = { { 0, "3" }, { 2, "4" } } } })
    eq(s.weight_versions, { "3", "4" })
    eq(s.weight_version_spans, { { 0, "3" }, { 6, "4" } })  -- a span runs to the next one
    eq(s:token_weight_versions(), { "3", "3", "3", "3", "3", "3", "4", "4" })
    local back = sample.from_dict(json.decode(json.encode(s:to_dict())))
    eq(back:token_weight_versions(), s:token_weight_versions())
  end)
  it("keeps the engine's logprob_digest only while every request of the sample reported the same one", function()
    local D1, D2 = ("a"):rep(32), ("b"):rep(32)
    local function turn(s, digest, version)
      s:append_response({ 7 }, { -0.5 }, { meta_info = { finish_reason = { type = "stop" }, weight_version = version,
        logprob_digest = digest } })
    end
    local s = sample.new { prompt = "p" }
    s.tokens = json.array { 1 }
    turn(s, D1, 1)
    eq(s.logprob_digest, D1)
    turn(s, D1, 1)                       -- a second turn under the same weights
    eq(s.logprob_digest, D1)
    turn(s, D2, 2)                       -- resumed after a sync: no longer one policy's
    eq(s.logprob_digest, nil)
    turn(s, D2, 2)                       -- and it does not come back
    eq(s.logprob_digest, nil)
    local t = sample.new { prompt = "p" }
    t.tokens = json.array { 1 }
    turn(t, D1, 1)
    turn(t, nil, 1)                      -- a request without one (another engine, exact kernels off)
    eq(t.logprob_digest, nil)
    local u = sample.new { prompt = "p" }
    u.tokens = json.array { 1 }
    turn(u, 42, 1)                       -- not a string: not a digest
    eq(u.logprob_digest, nil)
    -- it survives the round trip of a partial rollout's buffer
    turn(s, nil, 3)
    local v = sample.new { prompt = "p" }
    v.tokens = json.array { 1 }
    turn(v, D1, 1)
    eq(sample.from_dict(json.decode(json.encode(v:to_dict()))).logprob_digest, D1)
  end)
  it("round-trips through to_dict / JSON / from_dict, keeping unknown keys", function()
    local s = sample.new { prompt = { { role = "user", content = "hi" } }, label = "2", index = 1 }
    s.trace = { version = 1, events = json.array() }
    s.custom_field = "x"
    local back = sample.from_dict(json.decode(json.encode(s:to_dict())))
    eq(back.prompt, s.prompt)
    eq(back.trace.version, 1)
    eq(back.custom_field, "x")
    eq(back.spec_info.spec_verify_ct, 0)
    eq(json.encode(back.tokens), "[]")
    local partial = sample.from_dict { status = "aborted", prefix_cache_info = { cached_tokens = 3 } }
    eq(partial.prefix_cache_info, { cached_tokens = 3, total_prompt_tokens = 0 })
    raises(function() sample.from_dict { status = 3 } end, "status")
  end)
end)

describe("rl.data", function()
  it("loads GSM8K with --input-key question --label-key answer, in slime's shuffled order", function()
    local path = test_data("gsm8k/train.jsonl")
    local ds = rl.data.load(path, { input_key = "question", label_key = "answer", shuffle = true, seed = 42 })
    eq(ds:size(), 7473)
    local groups = ds:get_samples(3, 4)
    eq(#groups, 3)
    eq(#groups[1], 4)
    eq(groups[2][1].group_index, 1)
    eq(groups[3][4].index, 11)
    ok(groups[1][1].label:find("####"), "label is the answer field")
    local py = python(("import json,random\nrows=[json.loads(l) for l in open(\"%s\") if l.strip()]\nidx=list(range(len(rows)))\nrandom.Random(42).shuffle(idx)\nprint(rows[idx[2]][\"question\"])"):format(path))
    eq(groups[3][1].prompt, py:gsub("\n$", ""))
    groups[1][1].response = "changed"
    eq(groups[1][2].response, "", "copies are independent")
  end)
  it("wraps into the next epoch with a new order and resumes exactly from a saved state", function()
    local path = tmpfile(".jsonl", '{"input": "a"}\n\n{"input": "b"}\n{"input": "c"}\n')
    local ds = rl.data.load(path, { shuffle = true, seed = 1 })
    local first = ds:get_samples(2)
    local st = ds:state()
    local rest = ds:get_samples(4)
    eq(ds.epoch_id, 1)
    local again = rl.data.load(path, { shuffle = true, seed = 1 })
    again:load_state(st)
    local rest2 = again:get_samples(4)
    for i = 1, 4 do
      eq(rest2[i][1].prompt, rest[i][1].prompt)
      eq(rest2[i][1].index, rest[i][1].index)
    end
    eq(#first, 2)
    os.remove(path)
  end)
  it("slices, reads JSON arrays, applies chat templates, drops long prompts", function()
    local jl = tmpfile(".jsonl", '{"q": "one"}\n{"q": "two"}\n{"q": "three four five six seven eight"}\n{"q": "four"}\n')
    local ds = rl.data.load(jl .. "@[1:-1]", { input_key = "q" })
    eq(ds:size(), 2)
    eq(ds:get_samples(1)[1][1].prompt, "two")
    local arr = tmpfile(".json", '[{"input": [{"role": "user", "content": "hi"}], "label": 3, "metadata": {"k": 1}}]')
    local tok = rl.tokenizer.load(test_data("tokenizers/qwen"))
    local d2 = rl.data.load(arr, { label_key = "label", apply_chat_template = true, tokenizer = tok })
    local s = d2:get_samples(1)[1][1]
    eq(s.prompt, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    eq(s.label, 3)
    eq(s.metadata.k, 1)
    local d3 = rl.data.load(jl, { input_key = "q", tokenizer = tok, max_prompt_len = 4 })
    eq(d3:size(), 3)  -- the six-word prompt is longer than 4 tokens
    os.remove(jl); os.remove(arr)
  end)
  it("bad rows name the file and line; skip_bad_rows counts them", function()
    local bad = tmpfile(".jsonl", '{"input": "a"}\nnot json\n{"other": 1}\n')
    raises(function() rl.data.load(bad) end, ".jsonl:2: not a JSON object")
    local ds = rl.data.load(bad, { skip_bad_rows = true })
    eq(ds:size(), 1)
    eq(ds.skipped, 2)
    local none = tmpfile(".jsonl", '{"other": 1}\n')
    raises(function() rl.data.load(none, { skip_bad_rows = true }) end, "no usable prompts")
    raises(function() rl.data.load(none) end, "no 'input' field (fields: other)")
    os.remove(none)
    raises(function() rl.data.load("/nonexistent.jsonl") end, "cannot open")
    raises(function() rl.data.load(bad, 3) end, "opts")
    raises(function() rl.data.load((bad:gsub("jsonl$", "csv"))) end, "unsupported file type")
    raises(function() rl.data.load((bad:gsub("jsonl$", "parquet"))) end, "parquet")
    os.remove(bad)
  end)
end)

describe("rl.data reads Parquet", function()
  -- The files are written by pyarrow (tests/e2e/test_data_parquet.py covers pandas,
  -- damaged files and every option); the module is librlhost_parquet.so.
  local function need_reader()
    if not pcall(require, "rlhost_parquet") then
      skip("the Parquet reader (librlhost_parquet.so)",
        "rlhost was configured without Arrow C++: run scripts/bootstrap.sh, reconfigure and rebuild")
    end
    if not python("import pyarrow; print(1)"):match("1") then
      skip("pyarrow in python3", "pip install pyarrow==26.0.1, or scripts/bootstrap.sh")
    end
  end
  it("gives the rows JSONL gives: nested columns, row groups, nulls, slices", function()
    need_reader()
    local dir = tmpdir(true)
    local rows = {}
    for i = 0, 6 do
      rows[#rows + 1] = json.encode {
        p = { { role = "user", content = "q" .. i } },
        a = i == 2 and json.null or tostring(i),
        metadata = { n = i, tags = json.array { "x", i % 2 == 0 and "even" or "odd" }, note = json.null },
      }
    end
    write_file(dir .. "/d.jsonl", table.concat(rows, "\n") .. "\n")
    python(("import pyarrow.json as j, pyarrow.parquet as pq\n"
      .. "pq.write_table(j.read_json(\"%s/d.jsonl\"), \"%s/d.parquet\", row_group_size=2)"):format(dir, dir))
    local opts = { input_key = "p", label_key = "a" }
    for _, spec in ipairs { "", "@[1:-2]" } do
      local a, b = rl.data.load(dir .. "/d.jsonl" .. spec, opts), rl.data.load(dir .. "/d.parquet" .. spec, opts)
      eq(b:size(), a:size())
      for i = 1, a:size() do eq(b.prompts[i]:to_dict(), a.prompts[i]:to_dict(), "prompt " .. i .. spec) end
    end
    local p = rl.data.load(dir .. "/d.parquet", opts).prompts
    eq(p[3].label, nil)
    ok(json.is_array(p[1].prompt) and json.is_array(p[1].metadata.tags))
    eq(p[1].metadata.note, json.null)
    raises(function() rl.data.load(dir .. "/d.parquet", { input_key = "q" }) end, "no column 'q' (columns: ")
    write_file(dir .. "/x.parquet", "PAR1 not really")
    raises(function() rl.data.load(dir .. "/x.parquet") end, "x.parquet: not a readable Parquet file")
    os.execute("rm -rf '" .. dir .. "'")
  end)
end)
