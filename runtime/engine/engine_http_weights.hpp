// A weight update sent over HTTP as safetensors (the server's
// /update_weights_from_safetensors): each request's body is a safetensors file
// holding some of the model's tensors under their Hugging Face names, or row slices
// of one (model/weight_buckets.hpp). Requests with the same update_id are staged,
// checked against the model's names, shapes and float dtypes as they arrive: a whole
// tensor stays where it is in its body, which the staging keeps, and the row slices
// of one are gathered into a buffer of its own. The last one installs every staged
// tensor at once between two engine steps (update_weights: the engine's layout and
// dtype), flushes the prefix cache and sets the weight version, so the engine never
// serves a half-updated model. A new update_id drops an unfinished update; so does
// any bad request (send the update again from its first part). Staged values are
// bounded by the model's, the bodies kept by 8 bytes a model value (past that,
// tensors are copied out of their body).
// LibTorch-free header: the engine's HTTP server calls it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
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
  Result receive(Engine& engine, const std::string& update_id, std::shared_ptr<const std::string> body, bool last,
                 const std::optional<std::string>& weight_version);

 private:
  struct Staged {
    model::DType dtype = model::DType::F32;
    std::vector<int64_t> shape;        // the model's
    const std::byte* data = nullptr;   // the values: in a kept body, or in `own`
    std::unique_ptr<std::byte[]> own;  // a sliced tensor's rows (or a copy, past the bodies' bound)
    std::vector<uint8_t> rows;         // sliced: which rows arrived (empty: sent whole)
    int64_t rows_got = 0;
  };
  // Stages `set`, parsed from `body`; keeps `body` when a tensor stays in it.
  void stage(const model::ModelConfig& config, const model::TensorSet& set,
             const std::shared_ptr<const std::string>& body);
  void drop();

  std::mutex mu_;
  std::string update_id_;
  std::map<std::string, Staged> staged_;
  std::vector<std::shared_ptr<const std::string>> bodies_;   // bodies whole tensors stay in
  size_t body_bytes_ = 0;                                    // their size in all
  int64_t values_ = 0;
};

}  // namespace rl::engine
