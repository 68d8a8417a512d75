// Tensor files: safetensors (single and sharded, read by mmap, written atomically)
// and GGUF (read, F32/F16). No LibTorch here: tensors are typed views of bytes;
// runtime/nn turns them into torch tensors.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.hpp"

namespace rl::model {

enum class DType { F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL };
const char* dtype_name(DType d);                   // safetensors spelling: "F32", "BF16", ...
DType dtype_from_name(const std::string& s, const std::string& where);  // throws naming `where`
size_t dtype_size(DType d);

// A tensor's bytes inside a mapped file (or an owned buffer), row-major, little-endian.
struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;
  size_t nbytes = 0;
  std::string file;  // the file it came from, for error messages
  int64_t numel() const;
};

// A set of named tensors kept alive by `owner` (mappings, converted buffers).
struct TensorSet {
  std::vector<TensorView> tensors;            // sorted by name
  std::map<std::string, std::string> metadata;  // safetensors __metadata__ / GGUF general.*
  std::shared_ptr<void> owner;
  const TensorView* find(const std::string& name) const;  // nullptr when absent
};

// One .safetensors file, memory-mapped, header validated.
TensorSet read_safetensors(const std::filesystem::path& file);
// A model directory: model.safetensors, or model.safetensors.index.json + shards.
// Also accepts a .safetensors file or an index .json file directly.
TensorSet read_safetensors_dir(const std::filesystem::path& dir);
// Parses safetensors bytes already in memory (a received weight update, a test
// buffer); `name` appears in errors. The views point into `data`: keep it alive
// (pass it as `owner`, or outlive the set).
TensorSet parse_safetensors(const void* data, size_t size, const std::string& name,
                            std::shared_ptr<void> owner = {});

// Checks names, shapes and dtypes against the config: missing, unexpected
// (lm_head.weight is allowed but unused when embeddings are tied), wrong shape,
// non-float dtype. Throws one error naming the file, tensor and a hint.
void validate_tensors(const TensorSet& set, const ModelConfig& config);

// GGUF v2/v3 reader (F32/F16/BF16 tensors). Returns the tensors under HF names and
// layout (q/k rows re-ordered from GGUF's interleaved RoPE pairs to rotate_half),
// and the HF config the GGUF metadata describes.
struct GgufModel {
  ModelConfig config;
  TensorSet tensors;
  nlohmann::json metadata;  // every key/value (arrays longer than 64 elements summarised)
};
GgufModel read_gguf(const std::filesystem::path& file);
// The same from bytes in memory; views of unconverted tensors point into `data`
// (kept alive by `owner` when given).
GgufModel parse_gguf(const void* data, size_t size, const std::string& name, std::shared_ptr<void> owner = {});

// Writing. Each file is written to a temp name and renamed into place.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;
};
// Writes `bytes` to `file` through a temp file, fsync and rename (never a torn file).
void write_file_atomic(const std::filesystem::path& file, std::string_view bytes);

void write_safetensors(const std::filesystem::path& file, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
// Writes model.safetensors, or, past `max_shard_bytes`, model-0000i-of-0000n.safetensors
// shards plus model.safetensors.index.json (HF layout). Returns the files written.
std::vector<std::filesystem::path> write_safetensors_dir(const std::filesystem::path& dir,
                                                         const std::vector<TensorToWrite>& tensors,
                                                         size_t max_shard_bytes = size_t(5) << 30,
                                                         const std::map<std::string, std::string>& metadata = {});

// What a streamed tensor will be: its bytes arrive later, through SafetensorsStream::write.
struct TensorSpec {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
};

// A Hugging Face safetensors directory written while its tensors arrive one at a
// time (in the order of `specs`), never all in memory: the same files
// write_safetensors_dir makes for the same tensors in that order (one
// model.safetensors up to max_shard_bytes, else greedy shards plus
// model.safetensors.index.json), except that within a file the data is in spec
// order (aligned when every tensor has the same dtype). Specs are checked and
// headers laid out up front; one file is open at a time; every file is written
// to a temp name and renamed on finish(), which also removes stale files of an
// earlier save. Destroyed unfinished, it leaves no file behind (the directory,
// when it had to create it, stays) and an earlier save untouched.
class SafetensorsStream {
 public:
  SafetensorsStream(const std::filesystem::path& dir, std::vector<TensorSpec> specs, size_t max_shard_bytes,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsStream();
  SafetensorsStream(const SafetensorsStream&) = delete;
  SafetensorsStream& operator=(const SafetensorsStream&) = delete;

  // The next tensor's bytes: `name` must be the next spec's and nbytes its size
  // (rl::Error naming the tensor otherwise, and nothing written).
  void write(const std::string& name, const void* data, size_t nbytes);
  // After the last tensor: commits every file (and the index when sharded) and
  // returns them as write_safetensors_dir does. Throws if tensors are missing.
  std::vector<std::filesystem::path> finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rl::model
