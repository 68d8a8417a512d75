--- rl.tinker_wire: the Tinker API's protobuf bodies (proto/tinker_public.proto, the schema
--- the `tinker` SDK publishes), in C++ (runtime/tinker/wire.cpp, libprotobuf), loaded on
--- first use. See docs/tinker.md, "Wire format".
--
--   local req, err = rl.tinker_wire.decode_forward_backward(body)  -- POST /api/v1/forward_backward
--   -- req = {model_id, seq_id, loss_fn, forward_only, loss_fn_config = {name = number|string},
--   --        data = {{tokens = {...}, chunk_lengths = {...},
--   --                 loss_fn_inputs = {name = {dtype = "float32"|"int64", shape = {...}, data = {...}}}}}}
--   local bytes = rl.tinker_wire.encode_forward_backward_output{
--     loss_fn_output_type = "ArrayRecord",                        -- the default
--     loss_fn_outputs = {{logprobs = {-0.5, -1.25}, elementwise_loss = {...}}},  -- per datum
--     metrics = {["loss:sum"] = 1.75}}
--   local bytes = rl.tinker_wire.encode_sample_response{
--     sequences = {{tokens = {...}, logprobs = {...}, stop_reason = "stop"|"length"}},
--     prompt_logprobs = {rl.json.null, -2.5, ...}}                -- optional; null = not computed
--
-- A tensor for an encoder is {dtype, shape, data} or a plain list of numbers (float32,
-- 1-D). Bytes that are not a request are a runtime failure (nil, err naming the message
-- and field: a 400 for the client); a bad table given to an encoder raises.
local M = {}

local HINT = "install the Debian packages libprotobuf-dev and protobuf-compiler (scripts/bootstrap.sh does), "
  .. "reconfigure and rebuild"

local mod
local function native()
  if mod then return mod end
  local ok, m = pcall(require, "rlhost_tinker")
  if not ok then
    local why = tostring(m)
    if why:find("module 'rlhost_tinker' not found", 1, true) then
      error("rl.tinker_wire: this rlhost was built without the Tinker wire codec (Protocol Buffers were not "
        .. "found when it was configured); " .. HINT, 3)
    end
    error("rl.tinker_wire: cannot load the Tinker wire codec (" .. why:match("[^\n]*") .. "); " .. HINT, 3)
  end
  mod = m
  return mod
end

--- True when this build has the codec (the module loads).
function M.available()
  return (pcall(native))
end

--- A ForwardBackwardRequest's bytes as a table, or nil, err.
function M.decode_forward_backward(bytes) return native().decode_forward_backward(bytes) end

--- A ForwardBackwardOutput (one ArrayRecord of every datum's named tensors) as bytes.
function M.encode_forward_backward_output(output) return native().encode_forward_backward_output(output) end

--- A SampleResponse as bytes.
function M.encode_sample_response(response) return native().encode_sample_response(response) end

return M
