--- rl.mathgen.tokenizer: a small byte-level BPE tokenizer derived from a corpus.
--
--   local tok, config = rl.mathgen.tokenizer.derive(texts, { max_merges = 1000 })
--   rl.mathgen.tokenizer.save(dir, tok, config)    -- tokenizer.json + tokenizer_config.json
--
-- The result is rl.model.byte_tokenizer's (the 256 GPT-2 byte symbols, Qwen's split
-- regex, <|endoftext|> <|im_start|> <|im_end|> and a ChatML template) plus the merges
-- learned here, so HF `tokenizers` and rl.tokenizer read it, every byte string
-- round-trips, and digits stay single tokens (the split isolates each \p{N}).
-- Training is classic BPE: count adjacent symbol pairs over the corpus' words
-- (weighted by frequency), merge the most frequent (ties: the smaller pair text),
-- repeat until max_merges or no pair occurs min_count times. Deterministic.
local M = {}

local function letter(b) return b and ((b >= 65 and b <= 90) or (b >= 97 and b <= 122) or b >= 128) end
local function digit(b) return b and b >= 48 and b <= 57 end
local function space(b) return b and (b == 32 or (b >= 9 and b <= 13)) end
local function newline(b) return b == 10 or b == 13 end
local function punct(b) return b and not space(b) and not letter(b) and not digit(b) end

local CONTRACTIONS = { "s", "t", "re", "ve", "m", "ll", "d" }

-- Length of the word starting at i: Qwen2's pre-tokenizer regex on ASCII text
-- (bytes >= 128 count as letters; the corpus here is ASCII).
local function word_len(s, i)
  local b, n = s:byte(i), #s
  if b == 39 then  -- (?i:'s|'t|'re|'ve|'m|'ll|'d)
    for _, c in ipairs(CONTRACTIONS) do
      if s:sub(i + 1, i + #c):lower() == c then return 1 + #c end
    end
  end
  local j = i
  if letter(b) or (not newline(b) and not digit(b) and letter(s:byte(i + 1))) then  -- [^\r\n\p{L}\p{N}]?\p{L}+
    j = i + 1
    while letter(s:byte(j)) do j = j + 1 end
    return j - i
  end
  if digit(b) then return 1 end  -- \p{N}
  j = (b == 32) and i + 1 or i   --  ?[^\s\p{L}\p{N}]+[\r\n]*
  if punct(s:byte(j)) then
    while punct(s:byte(j)) do j = j + 1 end
    while newline(s:byte(j)) do j = j + 1 end
    return j - i
  end
  local k = i  -- a whitespace run i..k-1
  while space(s:byte(k)) do k = k + 1 end
  for e = k - 1, i, -1 do  -- \s*[\r\n]+ : up to the run's last newline
    if newline(s:byte(e)) then return e - i + 1 end
  end
  if k > n or k - i == 1 then return k - i end  -- \s+(?!\S) at the end, or \s+
  return k - i - 1                             -- \s+(?!\S): the last space goes to the next word
end

--- The pre-tokenizer's words of s (specials must be cut out first).
function M.words(s)
  local out, i = {}, 1
  while i <= #s do
    local l = word_len(s, i)
    out[#out + 1] = s:sub(i, i + l - 1)
    i = i + l
  end
  return out
end

local SPECIAL = "<|[%w_]+|>"
--- Qwen2.5's tool tokens (added tokens, not special: they stay in decoded text).
M.TOOL_TOKENS = { "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>" }
local TOOL_TOKEN = "</?tool_%a+>"

--- Learns the merges: a list of {left, right} symbol pairs (byte-level symbols).
function M.train(texts, opts)
  opts = opts or {}
  local max_merges, min_count = opts.max_merges or 1000, opts.min_count or 2
  local chars = opts.byte_chars
  local counts = {}
  for _, text in ipairs(texts) do
    for piece in (text:gsub(SPECIAL, "\0"):gsub(TOOL_TOKEN, "\0")):gmatch("[^%z]+") do
      for _, w in ipairs(M.words(piece)) do counts[w] = (counts[w] or 0) + 1 end
    end
  end
  local words = {}
  for w, c in pairs(counts) do
    local syms = {}
    for k = 1, #w do syms[k] = chars[w:byte(k)] end
    words[#words + 1] = { syms = syms, count = c }
  end
  local merges = {}
  while #merges < max_merges do
    local pairs_ = {}
    for _, w in ipairs(words) do
      local s = w.syms
      for k = 1, #s - 1 do
        local key = s[k] .. " " .. s[k + 1]   -- byte-level symbols never contain a space
        pairs_[key] = (pairs_[key] or 0) + w.count
      end
    end
    local best, best_n = nil, 0
    for key, c in pairs(pairs_) do
      if c > best_n or (c == best_n and key < best) then best, best_n = key, c end
    end
    if not best or best_n < min_count then break end
    local a, b = best:match("^(%S+) (%S+)$")
    merges[#merges + 1] = { a, b }
    local ab = a .. b
    for _, w in ipairs(words) do
      local s, out, k = w.syms, {}, 1
      while k <= #s do
        if k < #s and s[k] == a and s[k + 1] == b then
          out[#out + 1] = ab
          k = k + 2
        else
          out[#out + 1] = s[k]
          k = k + 1
        end
      end
      w.syms = out
    end
  end
  return merges
end

-- ChatML that renders a "tool" turn as Qwen2.5 does: a user turn holding <tool_response>.
local CHATML_TOOLS = "{% for message in messages %}{% if message['role'] == 'tool' %}"
  .. "{{ '<|im_start|>user\\n<tool_response>\\n' + message['content'] + '\\n</tool_response><|im_end|>\\n' }}"
  .. "{% else %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{% endif %}"
  .. "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

--- tokenizer.json and tokenizer_config.json (tables) for a corpus of texts.
--- opts: max_merges (1000), min_count (2), max_length (model_max_length), tools (add
--- M.TOOL_TOKENS and a template with tool turns).
function M.derive(texts, opts)
  opts = opts or {}
  local json = require "rl.json"
  local tok, config = require("rl.model").byte_tokenizer(opts.max_length)
  local vocab, chars, next_id = tok.model.vocab, {}, 0
  for sym, id in pairs(vocab) do
    chars[id] = sym
    next_id = math.max(next_id, id + 1)
  end
  local merges = M.train(texts, { max_merges = opts.max_merges, min_count = opts.min_count, byte_chars = chars })
  local list = json.array {}
  for i, m in ipairs(merges) do
    list[i] = json.array { m[1], m[2] }
    local merged = m[1] .. m[2]
    if vocab[merged] == nil then
      vocab[merged] = next_id
      next_id = next_id + 1
    end
  end
  tok.model.merges = list
  if opts.tools then
    for _, content in ipairs(M.TOOL_TOKENS) do
      tok.added_tokens[#tok.added_tokens + 1] = { content = content, single_word = false, lstrip = false,
        rstrip = false, normalized = false, special = false }
    end
    config.chat_template = CHATML_TOOLS
  end
  -- HF numbers added tokens after the model's vocabulary: keep them there.
  for i, t in ipairs(tok.added_tokens) do t.id = next_id + i - 1 end
  return tok, config
end

--- Writes tokenizer.json and tokenizer_config.json into dir (which must exist). true, or nil, err.
function M.save(dir, tok, config)
  local json = require "rl.json"
  for name, v in pairs { ["tokenizer.json"] = json.encode(tok, { sort_keys = true }),
                         ["tokenizer_config.json"] = json.encode(config, { indent = 2, sort_keys = true }) } do
    local f, err = io.open(dir .. "/" .. name, "wb")
    if not f then return nil, err end
    f:write(v)
    f:close()
  end
  return true
end

return M
