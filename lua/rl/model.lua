--- rl.model: Hugging Face causal LMs (Llama, Qwen2, Qwen3 families) in LibTorch.
--
--   local m = assert(rl.model.load("/models/Qwen3-0.6B"))
--   print(m.config.num_hidden_layers, m:num_parameters())
--   local ids = m:generate({1, 365, 1191}, {max_new_tokens = 8})   -- greedy, KV cache
--   local dir = rl.model.init{config = {...}, seed = 1}             -- random model directory
--
-- Runtime failures (missing or corrupt files) return nil, err; misuse raises.
local native = require("rl.torch")._model
local json = require "rl.json"

local M = {}

local Model = {}
Model.__index = Model
for _, name in ipairs { "num_parameters", "parameters", "logprobs", "logits", "generate", "save" } do
  Model[name] = function(self, ...) return self._h[name](self._h, ...) end
end
function Model:__tostring()
  return ("rl.model(%s, %d layers, %.1fM parameters)"):format(
    self.config.architectures and self.config.architectures[1] or "?", self.config.num_hidden_layers,
    self:num_parameters() / 1e6)
end

-- LoRA adapters (docs/trainer.md, "LoRA"): PEFT's layout and files.
local Lora = {}
Lora.__index = Lora
local function wrap_lora(h) return setmetatable({ _h = h, config = h:config() }, Lora) end
M._wrap_lora = wrap_lora   -- rl.trainer's tr:lora()

--- Writes the adapter as PEFT's adapter_config.json + adapter_model.safetensors into
--- `dir` (peft.PeftModel.from_pretrained loads it). → true | nil, err
---@param dir string
---@param base_model? string base_model_name_or_path in adapter_config.json
function Lora:save_peft(dir, base_model) return self._h:save_peft(dir, base_model) end
--- {{name=, shape=}, ...} under PEFT's names.
function Lora:parameters() return self._h:parameters() end
function Lora:__tostring()
  return ("rl.model.lora(r=%d, alpha=%g, %s)"):format(self.config.rank, self.config.alpha,
    table.concat(self.config.target_modules, ","))
end

--- The native handle of an rl.lora adapter, or nil.
function M.lora_handle(l) return getmetatable(l) == Lora and l._h or nil end

--- A new LoRA adapter for this model's shape (float32, on its device): A
--- kaiming-uniform from `seed`, B zero (identity = false: random too, PEFT's
--- init_lora_weights=False). Not applied until model:set_lora(adapter).
---@param opts? {rank?: integer, alpha?: number, target_modules?: string|string[], seed?: integer, identity?: boolean}
function Model:new_lora(opts)
  if opts ~= nil and type(opts) ~= "table" then
    error("rl.model:new_lora: bad argument #1 'opts' (table expected, got " .. type(opts) .. ")", 2)
  end
  return wrap_lora(self._h:new_lora(opts))
end

--- Applies `adapter` (unmerged) in logprobs, logits and lora_grads; nil: the base alone.
function Model:set_lora(adapter)
  if adapter ~= nil and getmetatable(adapter) ~= Lora then
    error("rl.model:set_lora: bad argument #1 'adapter' (rl.model LoRA adapter or nil expected)", 2)
  end
  self._h:set_lora(adapter and adapter._h)
  self.lora = adapter
end

--- {peft_name = {flat gradient}}: the gradient, for the set adapter's tensors, of the
--- mean negative log-likelihood of ids[2..n] (checks against other implementations).
function Model:lora_grads(ids) return self._h:lora_grads(ids) end

--- Reads a PEFT LoRA adapter directory for `model`'s shape. → adapter | nil, err
---@param dir string
---@param model table an rl.model
function M.load_lora(dir, model)
  if type(dir) ~= "string" then
    error("rl.model.load_lora: bad argument #1 'dir' (string expected, got " .. type(dir) .. ")", 2)
  end
  if getmetatable(model) ~= Model then
    error("rl.model.load_lora: bad argument #2 'model' (rl.model expected, got " .. type(model) .. ")", 2)
  end
  local h, err = native.load_lora(dir, model._h)
  if not h then return nil, err end
  return wrap_lora(h)
end

--- The native handle of an rl.model (for the LibTorch modules that compute with it: the
--- trainer), or nil when `m` is not one.
function M.handle(m)
  return getmetatable(m) == Model and m._h or nil
end

-- path: where the model was loaded from (rl.trainer copies tokenizer files from it
-- into checkpoints).
local function wrap(h, path)
  return setmetatable({ _h = h, config = json.decode(h:config_json()), path = path }, Model)
end

-- rl.model.load's arguments checked, its options with the device resolved (or nil, why).
local function load_options(path, opts, fname)
  if type(path) ~= "string" then
    error(fname .. ": bad argument #1 'path' (string expected, got " .. type(path) .. ")", 3)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error(fname .. ": bad argument #2 'opts' (table expected, got " .. type(opts) .. ")", 3)
  end
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  local dev, derr = require("rl.device").resolve(o.device, fname .. ": opts.device")
  if not dev then return nil, derr end
  o.device = dev
  return o
end

--- Loads a model directory (config.json + safetensors, sharded or not) or a .gguf file.
---@param path string
---@param opts? {dtype?: string, device?: string}
function M.load(path, opts)
  local o, err = load_options(path, opts, "rl.model.load")
  if not o then return nil, err end
  local h, lerr = native.model_load(path, o)
  if not h then return nil, lerr end
  return wrap(h, path)
end

--- rl.model.load on a helper thread, from a task: the task waits, the event loop (its
--- servers, the other tasks) keeps running meanwhile.
function M.load_async(path, opts)
  local o, err = load_options(path, opts, "rl.model.load_async")
  if not o then return nil, err end
  local loader, op = native.model_load_start(path, o)
  local kind, why = require("rl.task").await_op(op, "rl.model.load_async")
  if kind ~= "done" then return nil, why end
  return wrap(loader:take(), path)
end

local fs = require("rl._fs")
local read_file, write_file = fs.read_file, fs.write_file

-- GPT-2's byte → printable character map, as UTF-8 strings.
local function byte_chars()
  local function utf8(cp)
    if cp < 0x80 then return string.char(cp) end
    return string.char(0xC0 + math.floor(cp / 64), 0x80 + cp % 64)  -- cp < 0x800 here
  end
  local chars, extra = {}, 0
  for b = 0, 255 do
    if (b >= 33 and b <= 126) or (b >= 161 and b <= 172) or (b >= 174) then
      chars[b] = utf8(b)
    else
      chars[b] = utf8(256 + extra)
      extra = extra + 1
    end
  end
  return chars
end

local QWEN_SPLIT = [[(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+]]
local CHATML = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content']"
  .. " + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

--- The tokenizer files rl.model.init writes when none is given: byte-level BPE over
--- the 256 bytes (no merges; Qwen's pre-tokenizer) plus <|endoftext|>, <|im_start|>,
--- <|im_end|>, and a ChatML chat template. Returns tokenizer.json and
--- tokenizer_config.json as tables.
function M.byte_tokenizer(max_length)
  local vocab, chars = {}, byte_chars()
  for b = 0, 255 do vocab[chars[b]] = b end
  local added = json.array {}
  for i, content in ipairs { "<|endoftext|>", "<|im_start|>", "<|im_end|>" } do
    added[i] = { id = 255 + i, content = content, single_word = false, lstrip = false, rstrip = false,
                 normalized = false, special = true }
  end
  local byte_level = { type = "ByteLevel", add_prefix_space = false, trim_offsets = false, use_regex = false }
  local tokenizer = {
    version = "1.0", added_tokens = added,
    normalizer = { type = "NFC" },
    pre_tokenizer = { type = "Sequence", pretokenizers = json.array {
      { type = "Split", pattern = { Regex = QWEN_SPLIT }, behavior = "Isolated", invert = false }, byte_level } },
    post_processor = byte_level,
    decoder = byte_level,
    model = { type = "BPE", vocab = vocab, merges = json.array {}, byte_fallback = false, fuse_unk = false,
              ignore_merges = false },
  }
  local config = {
    add_bos_token = false, bos_token = json.null, eos_token = "<|im_end|>", pad_token = "<|endoftext|>",
    model_max_length = max_length or 32768, tokenizer_class = "PreTrainedTokenizerFast", chat_template = CHATML,
  }
  return tokenizer, config
end

local TOKENIZER_FILES = { "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                          "merges.txt", "generation_config.json" }

--- Writes a random-initialised model directory (config.json, model.safetensors,
--- tokenizer files) and returns its path.
---@param opts {config: table|string, seed?: integer, dir?: string, dtype?: string, tokenizer?: string}
function M.init(opts)
  if type(opts) ~= "table" then
    error("rl.model.init: bad argument #1 'opts' (table expected, got " .. type(opts) .. ")", 2)
  end
  local config = opts.config
  if type(config) == "string" then
    local path = config:match("%.json$") and config or (config .. "/config.json")
    local text, err = read_file(path)
    if not text then return nil, "rl.model.init: cannot read config " .. path .. ": " .. tostring(err) end
    config = json.decode(text)
  elseif type(config) ~= "table" then
    error("rl.model.init: bad argument 'opts.config' (table or path expected, got " .. type(config) .. ")", 2)
  end
  local dir = opts.dir
  if dir == nil then
    dir = os.tmpname()
    os.remove(dir)
  end
  local ok, err = native.model_init(json.encode(config), dir, { seed = opts.seed or 0, dtype = opts.dtype })
  if not ok then return nil, err end
  if opts.tokenizer then
    local copied = 0
    for _, name in ipairs(TOKENIZER_FILES) do
      local text = read_file(opts.tokenizer .. "/" .. name)
      if text then
        assert(write_file(dir .. "/" .. name, text))
        copied = copied + 1
      end
    end
    if copied == 0 then return nil, "rl.model.init: no tokenizer files in " .. opts.tokenizer end
  else
    if (config.vocab_size or 0) < 259 then
      return nil, "rl.model.init: config.vocab_size " .. tostring(config.vocab_size)
        .. " is below 259, the size of the built-in byte tokenizer; hint: pass opts.tokenizer = <dir>"
    end
    local tok, tok_config = M.byte_tokenizer(config.max_position_embeddings)
    assert(write_file(dir .. "/tokenizer.json", json.encode(tok)))
    assert(write_file(dir .. "/tokenizer_config.json", json.encode(tok_config, { indent = 2 })))
  end
  return dir
end

return M
