-- rl.engine's vLLM backend without a vLLM: option checks, the missing-python error, the
-- flag pass-through and the SGLang <-> /v1/completions translation (a real vLLM 0.32
-- answer's shape). The real server: tests/vllm/ (ctest -L vllm).
local rl = require "rl"
local json = require "rl.json"
local vllm = require "rl.engine.vllm"

describe("rl.engine backend = 'vllm'", function()
  it("names the option for an unknown backend or a native-only option", function()
    raises(function() rl.engine.start { model = "/m", backend = "sglangx" } end, "opts.backend")
    raises(function() rl.engine.start { model = "/m", backend = "sglangx" } end, "'native' or 'vllm' expected")
    raises(function() rl.engine.start { model = "/m", backend = "vllm", kv_cache_tokens = 5 } end,
           "opts.kv_cache_tokens' (unknown option for backend 'vllm'; vLLM's own flags go in opts.vllm_args")
    raises(function() rl.engine.start { model = "/m", backend = "vllm", vllm_args = "x" } end, "opts.vllm_args")
  end)

  it("a missing python is an error with the install hint, and starts nothing", function()
    local eng, err = rl.engine.start { model = "/m", backend = "vllm", python = "/nonexistent/bin/python" }
    eq(eng, nil)
    ok(err:find("/nonexistent/bin/python (opts.python) does not exist", 1, true), err)
    ok(err:find("scripts/install_vllm.sh", 1, true), err)
  end)

  it("finds the python: opts, then the venv", function()
    eq(vllm.python("/x/python"), "/x/python")
    local p = vllm.python()
    ok(p:find("/bin/python$"), p)
  end)

  it("asks vLLM for the model's own context: max_position_embeddings, at most what the KV space holds", function()
    local dir = tmpdir(true)
    local function cfg(t)
      local c = { hidden_size = 128, num_hidden_layers = 4, num_attention_heads = 4, vocab_size = 534,
                  intermediate_size = 512 }
      for k, v in pairs(t) do c[k] = v end
      write_file(dir .. "/config.json", json.encode(c))
      return dir
    end
    eq(vllm.max_model_len(cfg { max_position_embeddings = 384 }, 1), 384)   -- the default model's
    eq(vllm.max_model_len(test_data("models/stories260K"), 1), 512)
    eq(vllm.max_model_len(cfg { max_position_embeddings = 131072 }, 1), 131072)
    -- 4 layers x 2 x 4 heads x 32 x 4 bytes = 4 KiB a token: 0.25 GiB holds 65536
    eq(vllm.max_model_len(cfg { max_position_embeddings = 131072 }, 0.25), 65536)
    eq(vllm.max_model_len(dir .. "/nowhere", 1), 2048)
  end)

  it("passes vLLM's flags through, sorted, true as a bare flag, tables as JSON", function()
    eq(vllm.vllm_flags { max_model_len = 384, enforce_eager = true, trust_remote_code = false,
                         profiler_config = { profiler = "torch" } },
       { "--enforce-eager", "--max-model-len", "384", "--profiler-config", '{"profiler":"torch"}' })
  end)
end)

describe("rl.engine.vllm translation", function()
  it("turns a /generate request into /v1/completions", function()
    local b = assert(vllm.completions_request({ input_ids = { 1, 2, 3 }, return_logprob = true, rid = 7,
      sampling_params = { max_new_tokens = 5, temperature = 0.5, top_k = -1, top_p = 0.9, stop = { "\n" },
                          sampling_seed = 3, n = 2, no_stop_trim = true } }, "m"))
    eq(b, { model = "m", prompt = { 1, 2, 3 }, return_token_ids = true, stream = false, max_tokens = 5,
            temperature = 0.5, top_p = 0.9, stop = { "\n" }, seed = 3, n = 2, include_stop_str_in_output = true,
            logprobs = 0, request_id = "7" })
    eq(assert(vllm.completions_request({ text = "hi", sampling_params = { top_k = 4 } })).top_k, 4)
    local _, err = vllm.completions_request { sampling_params = {} }
    ok(err:find("neither 'input_ids' nor 'text'", 1, true))
    _, err = vllm.completions_request { input_ids = { { 1 }, { 2 } } }
    ok(err:find("batched input_ids", 1, true))
  end)

  it("names a LoRA adapter as the model (lora_path: vLLM picks adapters by model name)", function()
    eq(assert(vllm.completions_request({ input_ids = { 1 }, lora_path = "policy" }, "base")).model, "policy")
    eq(assert(vllm.completions_request({ input_ids = { 1 }, lora_path = json.null }, "base")).model, "base")
    local _, err = vllm.completions_request { input_ids = { 1 }, lora_path = { "a", "b" } }
    ok(err:find("'lora_path' must name one loaded adapter", 1, true), err)
  end)

  it("starts LoRA serving at the smallest rank vLLM takes at or above the trainer's", function()
    eq({ vllm.lora_rank(1), vllm.lora_rank(4), vllm.lora_rank(8), vllm.lora_rank(9), vllm.lora_rank(300) },
       { 1, 8, 8, 16, 320 })
    local none, err = vllm.lora_rank(1024)
    eq(none, nil)
    ok(err:find("above the largest vLLM serves (512)", 1, true), err)
    raises(function() rl.engine.start { model = "/m", backend = "vllm", max_lora_rank = -1 } end, "max_lora_rank")
  end)

  it("sends a request where its backend takes it (rl.engine.vllm.target)", function()
    local req = { input_ids = { 1, 2, 3 }, sampling_params = { max_new_tokens = 4 } }
    local path, body = vllm.target(req, "vllm")
    eq({ path, body.prompt, body.max_tokens }, { "/v1/completions", { 1, 2, 3 }, 4 })
    path, body = vllm.target(req, "native")
    eq({ path, body == req }, { "/generate", true })
    local none, err = vllm.target({ sampling_params = {} }, "vllm")
    eq(none, nil)
    ok(err:find("neither 'input_ids' nor 'text'", 1, true), err)
  end)
  it("turns a completions answer into /generate outputs", function()
    local resp = json.decode [[{"id":"cmpl-1","object":"text_completion","model":"m","choices":[
      {"index":0,"text":" 7","logprobs":{"text_offset":[0,1],"token_logprobs":[-0.5,-0.25],
       "tokens":["token_id:5","token_id:9"],"top_logprobs":[{},{}]},"finish_reason":"length","stop_reason":null,
       "token_ids":[5,9],"prompt_token_ids":[1,2,3]},
      {"index":1,"text":"","logprobs":{"token_logprobs":[-1.0]},"finish_reason":"stop","stop_reason":2,
       "token_ids":[2],"prompt_token_ids":[1,2,3]},
      {"index":2,"text":"","logprobs":null,"finish_reason":"abort","token_ids":[],"prompt_token_ids":[1,2,3]}],
      "usage":{"prompt_tokens":3,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":2}}}]]
    local outs = assert(vllm.generate_response(resp, "4", 0.1))
    eq(#outs, 3)
    eq(outs[1].text, " 7")
    eq(outs[1].output_ids, { 5, 9 })
    local m = outs[1].meta_info
    eq(m.finish_reason, { type = "length", length = 2 })
    eq(m.output_token_logprobs, { { -0.5, 5, json.null }, { -0.25, 9, json.null } })
    eq({ m.prompt_tokens, m.completion_tokens, m.cached_tokens, m.weight_version }, { 3, 2, 2, "4" })
    eq(outs[2].meta_info.finish_reason, { type = "stop", matched = 2 })
    eq(outs[3].meta_info.finish_reason.type, "abort")
    eq(outs[3].meta_info.output_token_logprobs, nil)
    local _, err = vllm.generate_response({ error = { message = "x" } })
    ok(err:find("no 'choices'", 1, true))
  end)
end)
