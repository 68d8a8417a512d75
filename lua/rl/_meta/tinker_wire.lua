---@meta
-- LuaLS type stubs for rl.tinker_wire (lua/rl/tinker_wire.lua). See docs/tinker.md ("Wire format").

---@class rl.tinker_wire
rl.tinker_wire = {}

---@class rl.tinker_wire.Tensor
---@field dtype "float32"|"int64"
---@field shape integer[]
---@field data number[]   row-major

---@class rl.tinker_wire.Datum
---@field tokens integer[]           the model input: its text chunks' tokens, joined
---@field chunk_lengths integer[]    tokens per chunk
---@field loss_fn_inputs table<string, rl.tinker_wire.Tensor>  e.g. target_tokens, weights, advantages, logprobs

---@class rl.tinker_wire.ForwardBackwardRequest
---@field model_id string
---@field seq_id integer
---@field loss_fn string             e.g. "cross_entropy", "importance_sampling", "ppo"
---@field forward_only boolean       the SDK's forward(): no backward
---@field loss_fn_config table<string, number|string>
---@field data rl.tinker_wire.Datum[]

---@class rl.tinker_wire.ForwardBackwardOutput
---@field loss_fn_output_type? string   default "ArrayRecord"
---@field loss_fn_outputs? table<string, rl.tinker_wire.Tensor|number[]>[]  per datum; a plain list is float32, 1-D
---@field metrics? table<string, number>   "name:reduction" (one colon; the SDK splits there), e.g. ["loss:sum"]

---@class rl.tinker_wire.Topk
---@field k integer
---@field token_ids integer[]   rows x k, row-major
---@field logprobs number[]     rows x k, row-major

---@class rl.tinker_wire.SampledSequence
---@field tokens integer[]
---@field logprobs? number[]          one per token
---@field stop_reason? "stop"|"length"  default "stop"
---@field topk? rl.tinker_wire.Topk   one row per token

---@class rl.tinker_wire.SampleResponse
---@field sequences rl.tinker_wire.SampledSequence[]
---@field prompt_logprobs? (number|lightuserdata)[]  rl.json.null (or NaN) where none was computed
---@field topk_prompt_logprobs? rl.tinker_wire.Topk
---@field prompt_cache_hit_tokens? integer

--- True when this build has the codec (rlhost was configured with Protocol Buffers).
---@return boolean
function rl.tinker_wire.available() end

--- A ForwardBackwardRequest's protobuf bytes (the body of POST /api/v1/forward_backward)
--- as a table, or nil, err naming the message and field.
---@param bytes string
---@return rl.tinker_wire.ForwardBackwardRequest|nil req, string|nil err
function rl.tinker_wire.decode_forward_backward(bytes) end

--- A ForwardBackwardOutput's protobuf bytes (retrieve_future's answer for a forward or
--- forward_backward). Raises, naming the field, on a table that does not fit.
---@param output rl.tinker_wire.ForwardBackwardOutput
---@return string
function rl.tinker_wire.encode_forward_backward_output(output) end

--- A SampleResponse's protobuf bytes (retrieve_future's answer for a sample). Raises,
--- naming the field, on a table that does not fit.
---@param response rl.tinker_wire.SampleResponse
---@return string
function rl.tinker_wire.encode_sample_response(response) end
