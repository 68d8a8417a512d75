// The Tinker wire codec: generated protobuf classes <-> the plain structs of wire.hpp.
#include "tinker/wire.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/wire_format_lite.h>

#include "tinker_public.pb.h"

namespace rl::tinker {

static_assert(std::endian::native == std::endian::little, "the wire's arrays are little-endian, as this host");

namespace pb = ::tinker_public;
using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::internal::WireFormatLite;

const char* dtype_name(DType d) { return d == DType::Float32 ? "float32" : "int64"; }

namespace {

// Elements of a tensor are capped so that a hostile shape cannot overflow a size_t.
constexpr int64_t kMaxElements = int64_t{1} << 34;
// A sparse tensor's bytes do not bound its dense size: what a request may densify, all its
// sparse tensors together, is capped (2^28 elements: 1 GiB of float32).
constexpr int64_t kMaxDensified = int64_t{1} << 28;

std::string quoted(const std::string& s) { return "['" + s + "']"; }

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

template <class T>
std::vector<T> read_array(const std::string& bytes, const std::string& where, const char* type) {
  if (bytes.size() % sizeof(T) != 0) {
    throw WireError(where + ": " + std::to_string(bytes.size()) + " bytes is not a whole number of " + type + " (" +
                    std::to_string(sizeof(T)) + " bytes each)");
  }
  std::vector<T> out(bytes.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

template <class T>
std::string to_bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// ---- where a parse failed: a walk of the wire format against the schema ----------------

// protobuf logs why a parse failed (e.g. a string that is not UTF-8) instead of returning
// it: the last such line of this thread is kept for the error message.
thread_local std::string g_last_log;
void keep_log(google::protobuf::LogLevel, const char*, int, const std::string& message) { g_last_log = message; }

// "<path>: <what>" for the first thing in [p, end) that cannot be a `d`, or "".
std::string locate_damage(const Descriptor* d, const uint8_t* p, const uint8_t* end, const std::string& path,
                          int depth) {
  if (depth > 32) return path + ": nested too deeply";
  google::protobuf::io::CodedInputStream in(p, static_cast<int>(end - p));
  std::map<int, int> seen;  // field number -> occurrences so far (the index of a repeated one)
  while (true) {
    const int at = in.CurrentPosition();
    const uint32_t tag = in.ReadTag();
    if (tag == 0) {
      if (at == static_cast<int>(end - p)) return "";
      return path + ": invalid field tag at byte " + std::to_string(at);
    }
    const int number = WireFormatLite::GetTagFieldNumber(tag);
    const FieldDescriptor* f = d->FindFieldByNumber(number);
    std::string where = path + "." + (f ? f->name() : "<field " + std::to_string(number) + ">");
    const int index = seen[number]++;
    if (f && f->is_repeated() && !f->is_map()) where += "[" + std::to_string(index) + "]";
    switch (WireFormatLite::GetTagWireType(tag)) {
      case WireFormatLite::WIRETYPE_VARINT: {
        uint64_t v;
        if (!in.ReadVarint64(&v)) return where + ": truncated varint";
        break;
      }
      case WireFormatLite::WIRETYPE_FIXED64: {
        uint64_t v;
        if (!in.ReadLittleEndian64(&v)) return where + ": truncated (8 bytes expected)";
        break;
      }
      case WireFormatLite::WIRETYPE_FIXED32: {
        uint32_t v;
        if (!in.ReadLittleEndian32(&v)) return where + ": truncated (4 bytes expected)";
        break;
      }
      case WireFormatLite::WIRETYPE_LENGTH_DELIMITED: {
        uint32_t len;
        if (!in.ReadVarint32(&len)) return where + ": truncated length";
        const int pos = in.CurrentPosition();
        const auto left = static_cast<uint32_t>((end - p) - pos);
        if (len > left) {
          return where + ": declares " + std::to_string(len) + " bytes, only " + std::to_string(left) + " left";
        }
        if (f && f->type() == FieldDescriptor::TYPE_MESSAGE) {
          std::string inner = locate_damage(f->message_type(), p + pos, p + pos + len, where, depth + 1);
          if (!inner.empty()) return inner;
        } else if (f && f->type() == FieldDescriptor::TYPE_STRING &&
                   !WireFormatLite::VerifyUtf8String(reinterpret_cast<const char*>(p + pos), static_cast<int>(len),
                                                     WireFormatLite::PARSE, where.c_str())) {
          return where + ": not valid UTF-8";
        }
        in.Skip(static_cast<int>(len));
        break;
      }
      default:
        return where + ": wire type " + std::to_string(WireFormatLite::GetTagWireType(tag)) +
               " (groups are not used by this schema)";
    }
  }
}

template <class M>
void parse(M& msg, std::string_view bytes) {
  static std::once_flag quiet;
  std::call_once(quiet, [] { google::protobuf::SetLogHandler(keep_log); });
  const std::string name(M::descriptor()->name());
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    throw WireError(name + ": " + std::to_string(bytes.size()) + " bytes is over protobuf's 2 GiB limit");
  }
  g_last_log.clear();
  if (msg.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return;
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  std::string where = locate_damage(M::descriptor(), p, p + bytes.size(), name, 0);
  if (where.empty()) where = name + ": not a valid protobuf message" + (g_last_log.empty() ? "" : " (" + g_last_log + ")");
  throw WireError(where + " (" + std::to_string(bytes.size()) + " bytes; hint: is the body a protobuf " + name +
                  " as the tinker SDK sends it, and not zstd-compressed or JSON?)");
}

// ---- requests --------------------------------------------------------------------------

int64_t checked_numel(const std::vector<int64_t>& shape, const std::string& where) {
  int64_t n = 1;
  for (int64_t s : shape) {
    if (s < 0) throw WireError(where + ".shape: negative dimension in " + shape_text(shape));
    if (s != 0 && n > kMaxElements / s) throw WireError(where + ".shape: " + shape_text(shape) + " is too large");
    n *= s;
  }
  return n;
}

template <class T>
void densify_csr(const pb::SparseCsr& csr, const std::vector<int64_t>& shape, const std::string& where,
                 std::vector<T>& out) {
  const std::string w = where + ".sparse_csr";
  if (shape.size() != 2) throw WireError(w + ": a CSR tensor is 2-D, shape is " + shape_text(shape));
  const int64_t rows = shape[0], cols = shape[1];
  auto values = read_array<T>(csr.values(), w + ".values", sizeof(T) == 4 ? "float32" : "int64");
  auto crow = read_array<int64_t>(csr.crow_indices(), w + ".crow_indices", "int64");
  auto col = read_array<int64_t>(csr.col_indices(), w + ".col_indices", "int64");
  if (static_cast<int64_t>(crow.size()) != rows + 1) {
    throw WireError(w + ".crow_indices: " + std::to_string(crow.size()) + " row pointers for " +
                    std::to_string(rows) + " rows (rows + 1 expected)");
  }
  if (col.size() != values.size()) {
    throw WireError(w + ": " + std::to_string(values.size()) + " values but " + std::to_string(col.size()) +
                    " column indices");
  }
  if (crow.front() != 0 || crow.back() != static_cast<int64_t>(values.size())) {
    throw WireError(w + ".crow_indices: must run from 0 to the number of values (" + std::to_string(values.size()) +
                    "), runs from " + std::to_string(crow.front()) + " to " + std::to_string(crow.back()));
  }
  // Non-decreasing from 0 to the count: every row's range then lies inside the values.
  for (int64_t r = 0; r < rows; ++r) {
    if (crow[r + 1] < crow[r]) throw WireError(w + ".crow_indices: decreasing at row " + std::to_string(r));
  }
  out.assign(static_cast<size_t>(rows * cols), T{});
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = crow[r]; i < crow[r + 1]; ++i) {
      if (col[i] < 0 || col[i] >= cols) {
        throw WireError(w + ".col_indices[" + std::to_string(i) + "]: " + std::to_string(col[i]) +
                        " is outside the " + std::to_string(cols) + " columns");
      }
      out[static_cast<size_t>(r * cols + col[i])] = values[i];
    }
  }
}

// `densify_left`: the elements the request's sparse tensors may still densify to.
Tensor decode_tensor(const pb::Tensor& t, const std::string& where, int64_t& densify_left) {
  Tensor out;
  size_t item = 0;
  switch (t.dtype()) {
    case pb::DTYPE_FLOAT32: out.dtype = DType::Float32; item = 4; break;
    case pb::DTYPE_INT64: out.dtype = DType::Int64; item = 8; break;
    default:
      throw WireError(where + ".dtype: " + pb::DType_Name(t.dtype()) + " (" + std::to_string(t.dtype()) +
                      "); the SDK sends float32 or int64 tensors");
  }
  out.shape.assign(t.shape().begin(), t.shape().end());
  switch (t.encoding_case()) {
    case pb::Tensor::kDense: {
      const std::string& b = t.dense();
      if (out.shape.empty()) {  // the SDK's TensorData without a shape: a vector
        if (b.size() % item != 0) {
          throw WireError(where + ".dense: " + std::to_string(b.size()) + " bytes is not a whole number of " +
                          dtype_name(out.dtype));
        }
        out.shape = {static_cast<int64_t>(b.size() / item)};
      }
      const int64_t n = checked_numel(out.shape, where);
      if (b.size() != static_cast<size_t>(n) * item) {
        throw WireError(where + ".dense: " + std::to_string(b.size()) + " bytes for shape " + shape_text(out.shape) +
                        " " + dtype_name(out.dtype) + " (" + std::to_string(n * static_cast<int64_t>(item)) +
                        " bytes)");
      }
      if (out.dtype == DType::Float32) out.f32 = read_array<float>(b, where + ".dense", "float32");
      else out.i64 = read_array<int64_t>(b, where + ".dense", "int64");
      break;
    }
    case pb::Tensor::kSparseCsr: {
      const int64_t n = checked_numel(out.shape, where);
      if (n > densify_left) {
        throw WireError(where + ".sparse_csr: shape " + shape_text(out.shape) + " densifies to " + std::to_string(n) +
                        " elements, over what one request may densify (" + std::to_string(kMaxDensified) +
                        " elements, its sparse tensors together)");
      }
      densify_left -= n;
      if (out.dtype == DType::Float32) densify_csr(t.sparse_csr(), out.shape, where, out.f32);
      else densify_csr(t.sparse_csr(), out.shape, where, out.i64);
      break;
    }
    default:
      if (checked_numel(out.shape, where) != 0) {
        throw WireError(where + ": neither dense nor sparse_csr is set, for shape " + shape_text(out.shape));
      }
  }
  return out;
}

Datum decode_datum(const pb::Datum& d, const std::string& where, int64_t& densify_left) {
  Datum out;
  for (int i = 0; i < d.model_input_size(); ++i) {
    const pb::Chunk& c = d.model_input(i);
    const std::string w = where + ".model_input[" + std::to_string(i) + "]";
    switch (c.chunk_case()) {
      case pb::Chunk::kEncodedText: {
        auto toks = read_array<int32_t>(c.encoded_text().tokens(), w + ".encoded_text.tokens", "int32");
        out.tokens.insert(out.tokens.end(), toks.begin(), toks.end());
        out.chunk_lengths.push_back(toks.size());
        break;
      }
      case pb::Chunk::kImage:
        throw WireError(w + ": an image chunk; rlhost serves text models only (encoded_text chunks)");
      case pb::Chunk::kDmel:
        throw WireError(w + ": an audio (dmel) chunk; rlhost serves text models only (encoded_text chunks)");
      default:
        throw WireError(w + ": an empty chunk (none of encoded_text, image, dmel is set)");
    }
  }
  for (const auto& [name, t] : d.loss_fn_inputs()) {
    out.loss_fn_inputs.emplace(name, decode_tensor(t, where + ".loss_fn_inputs" + quoted(name), densify_left));
  }
  return out;
}

// ---- results ---------------------------------------------------------------------------

pb::DType proto_dtype(DType d) { return d == DType::Float32 ? pb::DTYPE_FLOAT32 : pb::DTYPE_INT64; }

void put_topk(const TopkLogprobs& t, size_t rows, const std::string& where, pb::TopkLogprobs* out) {
  if (t.token_ids.size() != t.logprobs.size()) {
    throw WireError(where + ": " + std::to_string(t.token_ids.size()) + " token ids but " +
                    std::to_string(t.logprobs.size()) + " logprobs");
  }
  if (t.k == 0 || t.token_ids.size() != rows * t.k) {
    throw WireError(where + ": " + std::to_string(t.token_ids.size()) + " entries is not " + std::to_string(rows) +
                    " rows of k = " + std::to_string(t.k));
  }
  out->set_k(t.k);
  out->set_length(static_cast<uint32_t>(rows));
  out->set_token_ids(to_bytes(t.token_ids));
  out->set_logprobs(to_bytes(t.logprobs));
}

}  // namespace

ForwardBackwardRequest decode_forward_backward_request(std::string_view bytes) {
  pb::ForwardBackwardRequest msg;
  parse(msg, bytes);
  ForwardBackwardRequest out;
  out.model_id = msg.model_id();
  out.seq_id = msg.seq_id();
  out.loss_fn = msg.loss_fn();
  out.forward_only = msg.forward_only();
  if (!msg.loss_fn_config_v2().empty()) {
    for (const auto& [k, v] : msg.loss_fn_config_v2()) {
      ConfigValue c;
      switch (v.value_case()) {
        case pb::LossConfigValue::kNumber: c.number = v.number(); break;
        case pb::LossConfigValue::kText: c.is_text = true; c.text = v.text(); break;
        default: throw WireError("ForwardBackwardRequest.loss_fn_config_v2" + quoted(k) + ": neither number nor text is set");
      }
      out.loss_fn_config.emplace(k, std::move(c));
    }
  } else {
    for (const auto& [k, v] : msg.loss_fn_config()) out.loss_fn_config.emplace(k, ConfigValue{false, v, {}});
  }
  out.data.reserve(static_cast<size_t>(msg.data_size()));
  int64_t densify_left = kMaxDensified;
  for (int i = 0; i < msg.data_size(); ++i) {
    out.data.push_back(decode_datum(msg.data(i), "ForwardBackwardRequest.data[" + std::to_string(i) + "]", densify_left));
  }
  return out;
}

std::string encode_forward_backward_output(const ForwardBackwardOutput& out) {
  pb::ForwardBackwardOutput msg;
  msg.set_loss_fn_output_type(out.loss_fn_output_type);
  for (const auto& [k, v] : out.metrics) {
    // The SDK combines the results of a request's chunks with `name, reduction = key.split(":")`.
    const size_t colon = k.find(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == k.size() || k.find(':', colon + 1) != std::string::npos) {
      throw WireError("ForwardBackwardOutput.metrics" + quoted(k) + ": the SDK splits a metric's name at its one ':' "
                      "into name and reduction (mean, sum, min, max, slack, hash2, unique), e.g. 'loss:sum'");
    }
    (*msg.mutable_metrics())[k] = v;
  }
  const size_t n = out.loss_fn_outputs.size();
  if (n > 0) {
    pb::ArrayRecord* rec = msg.add_loss_fn_outputs();
    rec->set_type_tag(out.loss_fn_output_type);
    rec->set_num_datums(static_cast<int64_t>(n));
    const auto& first = out.loss_fn_outputs[0];
    for (size_t i = 1; i < n; ++i) {
      const auto& d = out.loss_fn_outputs[i];
      bool same = d.size() == first.size();
      for (auto a = d.begin(), b = first.begin(); same && a != d.end(); ++a, ++b) same = a->first == b->first;
      if (!same) {
        throw WireError("ForwardBackwardOutput.loss_fn_outputs[" + std::to_string(i) +
                        "]: its fields differ from loss_fn_outputs[0]'s (every datum has the same named outputs)");
      }
    }
    for (const auto& [name, t0] : first) {
      pb::BatchedTensor& bt = (*rec->mutable_fields())[name];
      bt.set_dtype(proto_dtype(t0.dtype));
      const std::vector<int64_t> trailing(t0.shape.size() > 1 ? t0.shape.begin() + 1 : t0.shape.end(), t0.shape.end());
      for (int64_t s : trailing) bt.add_trailing_shape(s);
      std::vector<int64_t> offsets{0};
      std::string data;
      for (size_t i = 0; i < n; ++i) {
        const Tensor& t = out.loss_fn_outputs[i].at(name);
        const std::string where = "ForwardBackwardOutput.loss_fn_outputs[" + std::to_string(i) + "]" + quoted(name);
        if (t.dtype != t0.dtype) {
          throw WireError(where + ": " + dtype_name(t.dtype) + ", but loss_fn_outputs[0]'s is " + dtype_name(t0.dtype));
        }
        const std::vector<int64_t> tr(t.shape.size() > 1 ? t.shape.begin() + 1 : t.shape.end(), t.shape.end());
        if (tr != trailing) {
          throw WireError(where + ": shape " + shape_text(t.shape) + " has other trailing dimensions than " +
                          "loss_fn_outputs[0]'s " + shape_text(t0.shape));
        }
        if (!t.shape.empty() && checked_numel(t.shape, where) != static_cast<int64_t>(t.size())) {
          throw WireError(where + ": " + std::to_string(t.size()) + " values for shape " + shape_text(t.shape));
        }
        if (t.dtype == DType::Float32) data += to_bytes(t.f32);
        else data += to_bytes(t.i64);
        offsets.push_back(static_cast<int64_t>(data.size()));
      }
      bt.set_data(std::move(data));
      bt.set_offsets(to_bytes(offsets));
    }
  }
  return msg.SerializeAsString();
}

std::string encode_sample_response(const SampleResponse& r) {
  pb::SampleResponse msg;
  for (size_t i = 0; i < r.sequences.size(); ++i) {
    const SampledSequence& s = r.sequences[i];
    const std::string where = "SampleResponse.sequences[" + std::to_string(i) + "]";
    pb::SampledSequence* out = msg.add_sequences();
    out->set_stop_reason(s.stop_reason == StopReason::Stop ? pb::STOP_REASON_STOP : pb::STOP_REASON_LENGTH);
    out->set_tokens(to_bytes(s.tokens));
    if (s.logprobs) {
      if (s.logprobs->size() != s.tokens.size()) {
        throw WireError(where + ".logprobs: " + std::to_string(s.logprobs->size()) + " for " +
                        std::to_string(s.tokens.size()) + " tokens");
      }
      out->set_logprobs(to_bytes(*s.logprobs));
    }
    if (s.topk) put_topk(*s.topk, s.tokens.size(), where + ".topk_sampled_logprobs", out->mutable_topk_sampled_logprobs());
  }
  if (r.prompt_logprobs) msg.set_prompt_logprobs(to_bytes(*r.prompt_logprobs));
  if (r.topk_prompt_logprobs) {
    const TopkLogprobs& t = *r.topk_prompt_logprobs;
    put_topk(t, t.k ? t.token_ids.size() / t.k : 0, "SampleResponse.topk_prompt_logprobs",
             msg.mutable_topk_prompt_logprobs());
  }
  msg.set_prompt_cache_hit_tokens(r.prompt_cache_hit_tokens);
  return msg.SerializeAsString();
}

}  // namespace rl::tinker
