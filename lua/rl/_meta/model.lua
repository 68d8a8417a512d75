---@meta
-- LuaLS type stubs for rl.model (lua/rl/model.lua over librlhost_torch.so).

---@class rl.model.LoadOptions
---@field dtype? "float32"|"bfloat16"|"float16" weights and compute dtype (default float32)
---@field device? string "cpu" (default) or "cuda:0" in CUDA builds

---@class rl.model.Parameter
---@field name string Hugging Face name, e.g. "model.layers.0.self_attn.q_proj.weight"
---@field shape integer[]
---@field dtype "float32"|"bfloat16"|"float16"

---@class rl.model.Model
---@field config table config.json as read (typed fields normalised: head_dim, num_key_value_heads, ...)
---@field path string the directory or .gguf file it was loaded from
local Model = {}

---@return integer
function Model:num_parameters() end

---@return rl.model.Parameter[]
function Model:parameters() end

--- log p(ids[i] | ids[1..i-1]) for i = 2..#ids, from float32 log_softmax(logits / temperature).
---@param ids integer[]
---@param opts? {temperature?: number}
---@return number[]
function Model:logprobs(ids, opts) end

--- Logits for every position ({#ids} rows of vocab_size numbers): for tests and small models.
---@param ids integer[]
---@return number[][]
function Model:logits(ids) end

--- Greedy continuation through the KV cache; stops after a stop id (default: config eos ids).
---@param ids integer[]
---@param opts? {max_new_tokens?: integer, stop_token_ids?: integer[]}
---@return integer[] new_ids
function Model:generate(ids, opts) end

--- Writes config.json + safetensors (sharded past max_shard_bytes, default 5 GiB).
---@param dir string
---@param opts? {dtype?: string, max_shard_bytes?: integer}
---@return true|nil ok
---@return string? err
function Model:save(dir, opts) end

--- A new LoRA adapter for this model's shape (float32, on its device; PEFT's init: A
--- kaiming-uniform from seed, B zero; identity = false: B random too). Not applied until set_lora.
---@param opts? {rank?: integer, alpha?: number, target_modules?: string|string[], seed?: integer, identity?: boolean}
---@return rl.model.Lora
function Model:new_lora(opts) end

--- Applies the adapter (unmerged) in logprobs, logits and lora_grads; nil: the base alone.
---@param adapter rl.model.Lora|nil
function Model:set_lora(adapter) end

--- The gradient, per PEFT tensor name of the set adapter, of the mean negative
--- log-likelihood of ids[2..n] (flattened): for checks against other implementations.
---@param ids integer[]
---@return table<string, number[]>
function Model:lora_grads(ids) end

---@class rl.model.LoraConfig
---@field rank integer
---@field alpha number
---@field target_modules string[]

---@class rl.model.Lora
---@field config rl.model.LoraConfig
local Lora = {}

--- PEFT's adapter_config.json + adapter_model.safetensors into dir.
---@param dir string
---@param base_model? string base_model_name_or_path
---@return true|nil ok
---@return string? err
function Lora:save_peft(dir, base_model) end

---@return {name: string, shape: integer[]}[]
function Lora:parameters() end

---@class rl.model.InitOptions
---@field config table|string config.json contents, or a path to one (or to its directory)
---@field seed? integer default 0
---@field dir? string default: a fresh temporary path
---@field dtype? string saved dtype (default float32)
---@field tokenizer? string copy tokenizer files from this directory instead of writing the byte tokenizer

---@class rl.model
rl.model = {}

--- A model directory (config.json + safetensors) or a .gguf file.
---@param path string
---@param opts? rl.model.LoadOptions
---@return rl.model.Model|nil
---@return string? err
function rl.model.load(path, opts) end

--- Writes a random-initialised model directory and returns its path.
---@param opts rl.model.InitOptions
---@return string|nil dir
---@return string? err
function rl.model.init(opts) end

--- The built-in byte-level tokenizer (tokenizer.json and tokenizer_config.json tables).
---@param max_length? integer
---@return table tokenizer_json
---@return table tokenizer_config
function rl.model.byte_tokenizer(max_length) end

--- A PEFT LoRA adapter directory (adapter_config.json + adapter_model.safetensors) for model's shape.
---@param dir string
---@param model rl.model.Model
---@return rl.model.Lora|nil
---@return string? err
function rl.model.load_lora(dir, model) end
