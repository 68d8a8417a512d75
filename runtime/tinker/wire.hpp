// The Tinker API's protobuf bodies (proto/tinker_public.proto, the `tinker` SDK's
// published schema) as plain C++ structs: the request the SDK POSTs to
// /api/v1/forward_backward, and the two results it wants as protobuf from
// /api/v1/retrieve_future (a forward/forward_backward's ForwardBackwardOutput, a sample's
// SampleResponse). Everything else of the API is JSON. Knows nothing of Lua or HTTP.
//
// Bad bytes or values throw WireError naming the message and field, e.g.
// "ForwardBackwardRequest.data[1].loss_fn_inputs['weights'].dense: 12 bytes for shape
// [4] float32 (16 bytes)".
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace rl::tinker {

class WireError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The public wire's tensor dtypes: float32 and int64 (the SDK's TensorDtype).
enum class DType { Float32, Int64 };
const char* dtype_name(DType d);

// A dense row-major tensor; exactly one of f32/i64 holds its numel() values.
struct Tensor {
  DType dtype = DType::Float32;
  std::vector<int64_t> shape;
  std::vector<float> f32;
  std::vector<int64_t> i64;
  size_t size() const { return dtype == DType::Float32 ? f32.size() : i64.size(); }
};

// A loss_fn_config value: the SDK sends numbers and (from v2) strings.
struct ConfigValue {
  bool is_text = false;
  double number = 0;
  std::string text;
};

struct Datum {
  std::vector<int64_t> tokens;  // the model input: its encoded_text chunks, in order
  std::vector<size_t> chunk_lengths;  // tokens per chunk (their sum is tokens.size())
  std::map<std::string, Tensor> loss_fn_inputs;  // e.g. target_tokens, weights, logprobs, advantages
};

struct ForwardBackwardRequest {
  std::string model_id;
  int32_t seq_id = 0;
  std::string loss_fn;  // e.g. cross_entropy, importance_sampling, ppo
  bool forward_only = false;  // the SDK's forward(): same endpoint, no backward
  std::map<std::string, ConfigValue> loss_fn_config;  // v2 when sent, else the legacy numbers
  std::vector<Datum> data;
};

// Throws WireError for bytes that are not a ForwardBackwardRequest, for image or audio
// (dmel) chunks (not served), and for tensors whose bytes do not match shape x dtype.
// A sparse CSR tensor comes back dense (unlisted entries 0, as the SDK's to_torch()); what
// one request's sparse tensors densify to is capped (2^28 elements together).
ForwardBackwardRequest decode_forward_backward_request(std::string_view bytes);

// ---- results ----------------------------------------------------------------------

// One ArrayRecord: per datum, the same named tensors (e.g. logprobs, elementwise_loss).
// Each field's tensors share dtype and trailing shape (shape[1:]) across datums.
struct ForwardBackwardOutput {
  std::string loss_fn_output_type = "ArrayRecord";
  std::vector<std::map<std::string, Tensor>> loss_fn_outputs;
  std::map<std::string, double> metrics;  // "name:reduction", e.g. "loss:sum" (the SDK splits at the ':')
};
std::string encode_forward_backward_output(const ForwardBackwardOutput& out);

// A length x k matrix, row-major.
struct TopkLogprobs {
  uint32_t k = 0;
  std::vector<int32_t> token_ids;
  std::vector<float> logprobs;
};

enum class StopReason { Stop, Length };

struct SampledSequence {
  StopReason stop_reason = StopReason::Stop;
  std::vector<int32_t> tokens;
  std::optional<std::vector<float>> logprobs;  // one per token
  std::optional<TopkLogprobs> topk;            // one row per token
};

struct SampleResponse {
  std::vector<SampledSequence> sequences;
  std::optional<std::vector<float>> prompt_logprobs;  // NaN where not computed (the SDK's None)
  std::optional<TopkLogprobs> topk_prompt_logprobs;
  int32_t prompt_cache_hit_tokens = 0;
};
// Throws WireError when logprobs or topk do not match the token count.
std::string encode_sample_response(const SampleResponse& r);

}  // namespace rl::tinker
