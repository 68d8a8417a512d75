// A weight update sent over HTTP as safetensors (the server's
// /update_weights_from_safetensors): each request's body is a safetensors file
// holding some of the model's tensors under their Hugging Face names, or row slices
// of one (model/weight_buckets.hpp). Requests with the same update_id are staged
// (checked against the model's names, shapes and float dtypes as they arrive, copied
// out of the body); the last one installs every staged tensor at once between two
// engine steps (update_weights: the engine's layout and dtype), flushes the prefix
// cache and sets the weight version, so the engine never serves a half-updated
// model. A new update_id drops an unfinished update; so does any bad request (send
// the update again from its first part). Staged values are bounded by the model's.
// LibTorch-free header: the engine's HTTP server calls it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/errors.hpp"
#include "model/tensor_files.hpp"

namespace rl::engine {

class Engine;

class WeightStaging {
 public:
  struct Result {
    bool installed = false;   // the last part: the new weights serve from now on
    size_t tensors = 0;       // tensors (or slices) this request held
    size_t staged = 0;        // tensors staged so far in this update (installed: all of them)
    std::string weight_version;
  };
  // Throws rl::Error naming the bad tensor, slice or body (the update is dropped).
  Result receive(Engine& engine, const std::string& update_id, const std::string& body, bool last,
                 const std::optional<std::string>& weight_version);

 private:
  struct Staged {
    model::DType dtype = model::DType::F32;
    std::vector<int64_t> shape;   // the model's
    std::vector<std::byte> bytes;
    std::vector<uint8_t> rows;    // sliced: which rows arrived (empty: sent whole)
    int64_t rows_got = 0;
  };
  void stage(const model::ModelConfig& config, const model::TensorSet& set);
  void drop();

  std::mutex mu_;
  std::string update_id_;
  std::map<std::string, Staged> staged_;
  int64_t values_ = 0;
};

}  // namespace rl::engine
