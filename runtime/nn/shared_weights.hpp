// Weights in a shared-memory file with two buffers, so another process on the
// same machine (the trainer) can hand an engine new weights without the engine
// copying them: the writer fills the buffer the engine is not reading, in the
// engine's own layout (transposed, fused), and the engine then points its
// parameters' storages at that buffer between two steps — a pointer swap.
//
// The owner (engine side) moves a model's parameters into buffer 0 of a new
// file (mode 0600, space reserved up front, so a full /dev/shm is an error here
// and never a SIGBUS later); the writer (trainer side) maps the file by the
// layout the owner describes. The mapping lives as long as any parameter
// storage or writer uses it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

namespace rl::nn {

struct SharedTensor {
  std::string name;   // the Hugging Face name
  std::string dtype;  // "float32" | "bfloat16" | "float16"
  std::vector<int64_t> shape, stride;  // in elements; the view the engine uses
  int64_t offset = 0;                  // bytes from the start of a buffer
};

struct SharedLayout {
  std::string id;    // changes whenever the owner makes a new file
  std::string path;  // the file (the writer may unlink it once mapped)
  int64_t buffer_bytes = 0;
  int buffers = 2;
  int active = 0;  // the buffer the engine reads now
  std::vector<SharedTensor> tensors;

  nlohmann::json to_json() const;
  static SharedLayout from_json(const nlohmann::json& j);  // throws rl::Error naming the bad field
};

struct SharedMapping;  // the mmap'd file

class SharedWeights {
 public:
  // Copies every parameter's storage (views share one) into buffer 0 of a new
  // file in `dir` and re-points the storages there. Parameters must be CPU
  // tensors. Throws rl::Error (no space, not a CPU model) leaving them as they were.
  SharedWeights(const std::vector<std::pair<std::string, torch::Tensor>>& params, const std::string& dir);
  ~SharedWeights();

  const SharedLayout& layout() const { return layout_; }
  // Points every storage at buffer `k` (the writer has filled it).
  void activate(int k);
  // `live` (a view on a parameter's storage) as it lies in buffer `k`: read that
  // buffer's values before activating it (the engine packs its GEMM panels from
  // them while it still reads the other). The view keeps the file mapped.
  torch::Tensor view_in(int k, const torch::Tensor& live) const;

 private:
  std::shared_ptr<SharedMapping> map_;
  std::vector<c10::Storage> storages_;
  std::vector<int64_t> offsets_;  // per storage, bytes into a buffer
  SharedLayout layout_;
};

// The writer's side: maps the file a layout names (checking its size and every
// tensor's extent) and writes named tensors into one of its buffers.
class SharedWeightsWriter {
 public:
  explicit SharedWeightsWriter(const SharedLayout& layout);
  const SharedLayout& layout() const { return layout_; }
  // Every layout tensor from `src` (same names and shapes; dtype converted): the
  // whole set, or rl::Error naming the first name missing on either side.
  void write(int buffer, const std::vector<std::pair<std::string, torch::Tensor>>& src);
  // Some of them (a sharded trainer's gathered unit): each named tensor must be in the
  // layout with its shape; the caller writes every one of them over its calls.
  void write_some(int buffer, const std::vector<std::pair<std::string, torch::Tensor>>& src);

 private:
  std::shared_ptr<SharedMapping> map_;
  SharedLayout layout_;
};

}  // namespace rl::nn
