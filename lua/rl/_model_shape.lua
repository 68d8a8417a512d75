--- Private: the shape of a Hugging Face model directory from its config.json, without
--- loading it (no LibTorch): what the engine checks need before anything starts — the
--- longest context the model was trained for (vLLM's max_model_len) and rough sizes of
--- the weights and the KV cache (engine counts against the machine's memory).
local M = {}

local function num(v) return type(v) == "number" and v == v and v > 0 and v or nil end

--- The shape of `dir` (a model directory, or its config.json), or nil, err:
--- {context, layers, hidden, heads, kv_heads, head_dim, intermediate, vocab, tied,
---  parameters (estimated from the shapes)}.
function M.read(dir)
  local path = dir:match("%.json$") and dir or (dir:gsub("/+$", "") .. "/config.json")
  local text, err = require("rl._fs").read_file(path)
  if not text then return nil, err end
  local c, derr = require("rl.json").decode(text)
  if type(c) ~= "table" then return nil, path .. ": " .. tostring(derr or "not a JSON object") end
  if type(c.text_config) == "table" and not num(c.hidden_size) then c = c.text_config end
  local s = { hidden = num(c.hidden_size), layers = num(c.num_hidden_layers), heads = num(c.num_attention_heads),
              vocab = num(c.vocab_size), intermediate = num(c.intermediate_size),
              context = num(c.max_position_embeddings), tied = c.tie_word_embeddings == true }
  if not (s.hidden and s.layers and s.heads and s.vocab) then
    return nil, path .. ": hidden_size, num_hidden_layers, num_attention_heads and vocab_size are required"
  end
  s.kv_heads = num(c.num_key_value_heads) or s.heads
  s.head_dim = num(c.head_dim) or math.floor(s.hidden / s.heads)
  s.intermediate = s.intermediate or 4 * s.hidden
  local q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
  local per_layer = s.hidden * q + 2 * s.hidden * kv + q * s.hidden + 3 * s.hidden * s.intermediate + 2 * s.hidden
  s.parameters = s.vocab * s.hidden * (s.tied and 1 or 2) + s.layers * per_layer + s.hidden
  return s
end

--- Bytes of KV cache per token at `dtype_bytes` per value.
function M.kv_bytes_per_token(s, dtype_bytes)
  return 2 * s.layers * s.kv_heads * s.head_dim * (dtype_bytes or 4)
end

return M
