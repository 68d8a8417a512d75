// Writing safetensors the way Hugging Face does: one file, or shards plus
// model.safetensors.index.json; every file written to a temp name and renamed.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>

#include "base/errors.hpp"
#include "model/tensor_files.hpp"
#include "model/tensor_files_io.hpp"

namespace rl::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kSingleName = "model.safetensors";
constexpr const char* kIndexName = "model.safetensors.index.json";

// model-00001-of-00003.safetensors
bool is_shard_name(const std::string& s) {
  auto digits = [&](size_t at) {
    for (size_t i = at; i < at + 5; ++i)
      if (s[i] < '0' || s[i] > '9') return false;
    return true;
  };
  return s.size() == 32 && s.compare(0, 6, "model-") == 0 && digits(6) && s.compare(11, 4, "-of-") == 0 && digits(15) &&
         s.compare(20, 12, ".safetensors") == 0;
}

std::string shard_name(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i, n);
  return buf;
}

// Checks what the caller hands in before any byte reaches the disk.
void check_tensors(const std::string& where, const std::vector<TensorToWrite>& tensors) {
  std::set<std::string> seen;
  for (const auto& t : tensors) {
    const std::string what = where + ": tensor '" + t.name + "'";
    if (t.name.empty()) throw Error(where + ": a tensor has an empty name");
    if (t.name == "__metadata__") throw Error(what + ": the name is reserved for the metadata", "rename the tensor");
    if (!seen.insert(t.name).second) throw Error(what + " is given twice", "tensor names must be unique");
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) throw Error(what + ": negative dimension " + std::to_string(d));
      if (detail::mul_overflows(numel, uint64_t(d), &numel)) throw Error(what + ": shape overflows");
    }
    uint64_t nbytes = 0;
    if (detail::mul_overflows(numel, dtype_size(t.dtype), &nbytes) || nbytes != t.nbytes)
      throw Error(what + ": nbytes is " + std::to_string(t.nbytes) + " but " + dtype_name(t.dtype) + " with " +
                      std::to_string(numel) + " elements needs " + std::to_string(nbytes),
                  "shape, dtype and nbytes must agree");
    if (t.nbytes > 0 && !t.data) throw Error(what + ": data is null");
  }
}

void remove_if_exists(const fs::path& p) {
  std::error_code ec;
  fs::remove(p, ec);
}

// Old shards or a single file left from an earlier save would shadow or
// confuse the new checkpoint. Only Hugging Face's own names are touched.
void remove_stale(const fs::path& dir, const std::set<std::string>& keep) {
  std::error_code ec;
  std::vector<fs::path> doomed;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (keep.count(name)) continue;
    if (name == kSingleName || name == kIndexName || is_shard_name(name)) doomed.push_back(entry.path());
  }
  for (const auto& p : doomed) remove_if_exists(p);
}

}  // namespace

void write_safetensors(const fs::path& file, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string where = file.string();
  check_tensors(where, tensors);

  // Data ordered by element size (largest first), then name, as the reference
  // writer does: with the header padded to 8 bytes every tensor stays aligned.
  std::vector<const TensorToWrite*> order;
  for (const auto& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const TensorToWrite* a, const TensorToWrite* b) {
    const size_t sa = dtype_size(a->dtype), sb = dtype_size(b->dtype);
    return sa != sb ? sa > sb : a->name < b->name;
  });

  json header = json::object();
  json meta = {{"format", "pt"}};
  for (const auto& [k, v] : metadata) meta[k] = v;
  header["__metadata__"] = meta;
  uint64_t offset = 0;
  for (const auto* t : order) {
    header[t->name] = {{"dtype", dtype_name(t->dtype)}, {"shape", t->shape}, {"data_offsets", {offset, offset + t->nbytes}}};
    offset += t->nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    throw Error(where + ": cannot encode the header (" + std::string(e.what()) + ")", "tensor names and metadata must be UTF-8");
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t header_len = text.size();

  detail::AtomicFile out(file);
  out.write(&header_len, 8);
  out.write(text.data(), text.size());
  for (const auto* t : order) out.write(t->data, t->nbytes);
  out.commit();
}

std::vector<fs::path> write_safetensors_dir(const fs::path& dir, const std::vector<TensorToWrite>& tensors,
                                            size_t max_shard_bytes, const std::map<std::string, std::string>& metadata) {
  if (max_shard_bytes == 0) throw Error(dir.string() + ": max_shard_bytes must be positive");
  check_tensors(dir.string(), tensors);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir, ec)) throw Error(dir.string() + ": cannot create the directory" + (ec ? " (" + ec.message() + ")" : ""));

  uint64_t total = 0;
  for (const auto& t : tensors) total += t.nbytes;
  if (total <= max_shard_bytes) {
    write_safetensors(dir / kSingleName, tensors, metadata);
    remove_stale(dir, {kSingleName});
    return {dir / kSingleName};
  }

  // Greedy split in the caller's order (transformers' split_torch_state_dict_into_shards):
  // a new shard starts when the next tensor would overflow the current one; a
  // tensor bigger than the limit gets a shard of its own.
  std::vector<std::vector<TensorToWrite>> shards(1);
  uint64_t current = 0;
  for (const auto& t : tensors) {
    if (!shards.back().empty() && current + t.nbytes > max_shard_bytes) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(t);
    current += t.nbytes;
  }

  std::vector<fs::path> written;
  std::set<std::string> keep{kIndexName};
  json weight_map = json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = shard_name(i + 1, shards.size());
    write_safetensors(dir / name, shards[i], metadata);
    for (const auto& t : shards[i]) weight_map[t.name] = name;
    written.push_back(dir / name);
    keep.insert(name);
  }
  const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  const std::string text = index.dump(2) + "\n";
  detail::AtomicFile out(dir / kIndexName);
  out.write(text.data(), text.size());
  out.commit();
  written.push_back(dir / kIndexName);
  remove_stale(dir, keep);
  return written;
}

}  // namespace rl::model
