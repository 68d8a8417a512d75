#include "engine/engine_http_weights.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <unordered_map>

#include "base/log_text.hpp"
#include "engine/engine.hpp"
#include "engine/engine_weights.hpp"
#include "model/weight_buckets.hpp"
#include "nn/weights.hpp"

namespace rl::engine {
namespace {

constexpr const char* kEp = "update_weights_from_safetensors";

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

bool is_float(model::DType d) {
  return d == model::DType::F32 || d == model::DType::F16 || d == model::DType::BF16 || d == model::DType::F64;
}

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

}  // namespace

void WeightStaging::drop() {
  staged_.clear();
  bodies_.clear();
  body_bytes_ = 0;
  update_id_.clear();
  values_ = 0;
}

void WeightStaging::stage(const model::ModelConfig& config, const model::TensorSet& set,
                          const std::shared_ptr<const std::string>& body) {
  std::unordered_map<std::string, std::vector<int64_t>> wanted;
  for (auto& spec : config.expected_tensors()) wanted[spec.name] = spec.shape;
  const int64_t model_values = config.num_parameters();
  // Whole tensors stay in their body while the bodies kept hold at most 8 bytes a model
  // value (twice the model in F32; a body may carry skipped tensors too); past that
  // they are copied out.
  const bool keep_body = body_bytes_ + body->size() <= size_t(model_values) * 8;
  bool kept = false;
  const std::string hint = "send this model's tensors under their Hugging Face names, shapes as its config.json makes them";
  for (const model::TensorView& t : set.tensors) {
    const std::string what = std::string(kEp) + ": tensor '" + t.name + "'";
    auto want = wanted.find(t.name);
    if (want == wanted.end()) {
      // Saved by some trainers, unused here: tied embeddings' head, old RoPE buffers.
      if ((t.name == "lm_head.weight" && config.tie_word_embeddings) ||
          std::string_view(t.name).ends_with(".rotary_emb.inv_freq"))
        continue;
      throw Error(what + " is not a weight of this model (" + config.architecture + ")", hint);
    }
    if (!is_float(t.dtype))
      throw Error(what + " has dtype " + model::dtype_name(t.dtype), "model weights are F32, F16, BF16 or F64");
    const std::vector<int64_t>& full = want->second;
    auto first = set.metadata.find(std::string(model::kFirstRowKey) + t.name);
    int64_t row0 = 0;
    if (first != set.metadata.end()) {  // a row slice
      try {
        size_t used = 0;
        row0 = std::stoll(first->second, &used);
        if (used != first->second.size()) throw std::invalid_argument("trailing");
      } catch (const std::exception&) {
        throw Error(what + ": first row '" + first->second + "' is not an integer");
      }
      std::vector<int64_t> rest(t.shape.begin() + (t.shape.empty() ? 0 : 1), t.shape.end());
      std::vector<int64_t> full_rest(full.begin() + (full.empty() ? 0 : 1), full.end());
      if (t.shape.empty() || full.empty() || rest != full_rest || row0 < 0 || row0 + t.shape[0] > full[0])
        throw Error(what + ": rows " + std::to_string(row0) + "+" + (t.shape.empty() ? "?" : std::to_string(t.shape[0])) +
                        " with shape " + shape_text(t.shape) + " do not fit the model's " + shape_text(full),
                    hint);
    } else if (t.shape != full) {
      throw Error(what + " has shape " + shape_text(t.shape) + ", the model's is " + shape_text(full), hint);
    }
    const int64_t n = numel(t.shape);
    if (values_ + n > model_values)
      throw Error(what + ": the update would hold " + std::to_string(values_ + n) + " values, the model has " +
                      std::to_string(model_values),
                  "send each weight once per update_id");
    auto [it, fresh] = staged_.try_emplace(t.name);
    Staged& s = it->second;
    const bool slice = first != set.metadata.end();
    if (fresh) {
      s.dtype = t.dtype;
      s.shape = full;
      if (slice) s.rows.assign(size_t(full[0]), 0);
    } else if (!slice || s.rows.empty()) {
      throw Error(what + " is sent twice in this update", "send each weight once per update_id");
    } else if (s.dtype != t.dtype) {
      throw Error(what + ": a slice has dtype " + std::string(model::dtype_name(t.dtype)) + ", an earlier one " +
                  model::dtype_name(s.dtype));
    }
    const size_t full_bytes = size_t(numel(full)) * model::dtype_size(t.dtype);
    const bool aligned = reinterpret_cast<uintptr_t>(t.data) % model::dtype_size(t.dtype) == 0;
    if (!slice && keep_body && aligned) {
      s.data = t.data;   // stays in the body
      kept = true;
    } else {
      if (!s.own) {   // not zero-filled: every row is written before the install reads it
        s.own.reset(new std::byte[full_bytes]);
        s.data = s.own.get();
      }
      size_t offset = 0;
      if (slice) {
        for (int64_t r = row0; r < row0 + t.shape[0]; ++r) {
          if (s.rows[size_t(r)]) throw Error(what + ": row " + std::to_string(r) + " is sent twice in this update");
          s.rows[size_t(r)] = 1;
        }
        s.rows_got += t.shape[0];
        offset = size_t(row0) * (full_bytes / size_t(full[0]));
      }
      std::memcpy(s.own.get() + offset, t.data, t.nbytes);
    }
    values_ += n;
  }
  if (kept) {
    bodies_.push_back(body);
    body_bytes_ += body->size();
  }
}

WeightStaging::Result WeightStaging::receive(Engine& engine, const std::string& update_id,
                                             std::shared_ptr<const std::string> body, bool last,
                                             const std::optional<std::string>& weight_version) {
  std::lock_guard lk(mu_);
  if (update_id != update_id_) {
    if (!staged_.empty())
      log::warn(std::string("engine: dropping the unfinished weight update '") + update_id_ + "' (" +
                std::to_string(staged_.size()) + " tensors staged): update '" + update_id + "' started");
    drop();
    update_id_ = update_id;
  }
  Result out;
  try {
    const model::TensorSet set = model::parse_safetensors(body->data(), body->size(), std::string(kEp) + " body");
    stage(engine.config(), set, body);
    out.tensors = set.tensors.size();
    out.staged = staged_.size();
    if (!last) {
      out.weight_version = engine.weight_version();
      return out;
    }
    for (const auto& [name, s] : staged_)
      if (!s.rows.empty() && s.rows_got != s.shape[0])
        throw Error(std::string(kEp) + ": tensor '" + name + "' has " + std::to_string(s.rows_got) + " of its " +
                        std::to_string(s.shape[0]) + " rows at the last part",
                    "send every slice before the part with last=1");
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::pair<std::string, torch::Tensor>> tensors;
    tensors.reserve(staged_.size());
    size_t copied = 0;
    for (auto& [name, s] : staged_) {
      copied += s.own != nullptr;
      tensors.emplace_back(name, torch::from_blob(const_cast<std::byte*>(s.data), s.shape,   // read only
                                                  torch::TensorOptions().dtype(nn::scalar_type(s.dtype))));
    }
    update_weights(engine, tensors, weight_version);
    char buf[192];
    std::snprintf(buf, sizeof buf,
                  "engine: %zu tensors from HTTP installed in %.3f s (%zu read in their request bodies, %zu copied "
                  "out: sliced, unaligned or past the bodies' bound)",
                  tensors.size(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                  tensors.size() - copied, copied);
    log::info(buf);
  } catch (...) {
    drop();
    throw;
  }
  drop();
  out.installed = true;
  out.weight_version = engine.weight_version();
  return out;
}

}  // namespace rl::engine
