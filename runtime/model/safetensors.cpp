// Reading safetensors: one file (memory-mapped, header validated before any
// view is handed out) or a sharded Hugging Face checkpoint directory.
#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "base/errors.hpp"
#include "base/json_input.hpp"
#include "model/tensor_files.hpp"
#include "model/tensor_files_io.hpp"

namespace rl::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

static_assert(std::endian::native == std::endian::little, "safetensors and GGUF readers assume a little-endian host");

// The Rust reference implementation refuses headers past 100 MB as well.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kCorruptHint = "the file is truncated or corrupt";

std::string short_json(const json& v) { return detail::json_brief(v); }

// A JSON number that is a non-negative integer, or nothing.
std::optional<uint64_t> as_index(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return uint64_t(v.get<int64_t>());
  return std::nullopt;
}

struct Entry {
  TensorView view;
  uint64_t begin = 0, end = 0;
};

Entry parse_entry(const std::string& file, const std::string& name, const json& v, const std::byte* data,
                  uint64_t data_len) {
  const std::string where = file + ": tensor '" + name + "'";
  auto fail = [&](const std::string& what, const char* hint = kCorruptHint) -> void { throw Error(where + ": " + what, hint); };
  if (!v.is_object()) fail("expected an object with dtype, shape and data_offsets, got " + short_json(v));
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!v.contains(key)) fail(std::string("missing '") + key + "'");

  Entry e;
  e.view.name = name;
  e.view.file = file;
  const json& dt = v.at("dtype");
  if (!dt.is_string()) fail("dtype must be a string, got " + short_json(dt));
  e.view.dtype = dtype_from_name(dt.get<std::string>(), where);

  const json& shape = v.at("shape");
  if (!shape.is_array()) fail("shape must be a list of non-negative integers, got " + short_json(shape));
  uint64_t numel = 1;
  for (const json& d : shape) {
    auto n = as_index(d);
    if (!n || *n > uint64_t(INT64_MAX)) fail("shape must be a list of non-negative integers, got " + short_json(shape));
    if (detail::mul_overflows(numel, *n, &numel)) fail("shape " + short_json(shape) + " overflows");
    e.view.shape.push_back(int64_t(*n));
  }
  uint64_t nbytes = 0;
  if (detail::mul_overflows(numel, dtype_size(e.view.dtype), &nbytes)) fail("shape " + short_json(shape) + " overflows");

  const json& off = v.at("data_offsets");
  std::optional<uint64_t> b, en;
  if (off.is_array() && off.size() == 2) b = as_index(off[0]), en = as_index(off[1]);
  if (!b || !en) fail("data_offsets must be [begin, end] (non-negative integers), got " + short_json(off));
  const std::string range = "data_offsets [" + std::to_string(*b) + ", " + std::to_string(*en) + "]";
  if (*b > *en) fail(range + " end before they begin");
  if (*en > data_len)
    fail(range + " exceed the file's data region (" + std::to_string(data_len) + " bytes)");
  if (*en - *b != nbytes)
    fail(range + " hold " + std::to_string(*en - *b) + " bytes, but " + dt.get<std::string>() + " " + short_json(shape) +
         " needs " + std::to_string(nbytes));
  e.begin = *b;
  e.end = *en;
  e.view.data = data + *b;
  e.view.nbytes = size_t(nbytes);
  return e;
}

json read_json_file(const fs::path& file, const char* hint) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(file.string() + ": cannot be opened for reading", hint);
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return json_input::parse(ss.str(), file.string(), json_input::file_limits());
  } catch (const json_input::Error& e) {
    throw Error(e.what(), !e.hinted() ? hint : "");  // a limit's message carries its own hint
  }
}

// Shard names come from the index file: keep them inside the model directory.
void check_shard_name(const fs::path& index, const std::string& tensor, const std::string& shard) {
  fs::path p(shard);
  bool ok = !shard.empty() && p.is_relative();
  for (const auto& part : p)
    if (part == "..") ok = false;
  if (!ok)
    throw Error(index.string() + ": weight_map['" + tensor + "'] = '" + shard + "' is not a file name inside the model directory",
                "shards are named like model-00001-of-00002.safetensors");
}

TensorSet read_sharded(const fs::path& index) {
  const json j = read_json_file(index, "expected {\"metadata\": {...}, \"weight_map\": {tensor: shard file}}");
  if (!j.is_object() || !j.contains("weight_map") || !j.at("weight_map").is_object())
    throw Error(index.string() + ": no 'weight_map' object", "expected {\"metadata\": {...}, \"weight_map\": {tensor: shard file}}");
  std::map<std::string, std::vector<std::string>> by_shard;
  for (const auto& [tensor, shard] : j.at("weight_map").items()) {
    if (!shard.is_string())
      throw Error(index.string() + ": weight_map['" + tensor + "'] must be a file name, got " + short_json(shard));
    check_shard_name(index, tensor, shard.get<std::string>());
    by_shard[shard.get<std::string>()].push_back(tensor);
  }

  TensorSet out;
  auto owners = std::make_shared<std::vector<std::shared_ptr<void>>>();
  for (const auto& [shard, names] : by_shard) {
    const fs::path file = index.parent_path() / shard;
    std::error_code ec;
    if (!fs::exists(file, ec))
      throw Error(file.string() + ": no such file (listed in " + index.filename().string() + " for '" + names.front() + "')",
                  "the checkpoint is incomplete; download or copy the missing shard");
    TensorSet part = read_safetensors(file);
    owners->push_back(part.owner);
    std::set<std::string> listed(names.begin(), names.end());
    for (const auto& name : names)
      if (!part.find(name))
        throw Error(file.string() + ": has no tensor '" + name + "', which " + index.filename().string() + " places there",
                    "the index and the shards disagree; re-download or re-save the checkpoint");
    for (auto& t : part.tensors) {
      if (!listed.count(t.name))
        throw Error(file.string() + ": tensor '" + t.name + "' is not listed in " + index.filename().string() + "'s weight_map",
                    "the index and the shards disagree; re-download or re-save the checkpoint");
      out.tensors.push_back(std::move(t));
    }
    for (const auto& [k, v] : part.metadata) out.metadata.emplace(k, v);
  }
  if (j.contains("metadata") && j.at("metadata").is_object())
    for (const auto& [k, v] : j.at("metadata").items()) out.metadata[k] = v.is_string() ? v.get<std::string>() : short_json(v);
  std::sort(out.tensors.begin(), out.tensors.end(), [](const TensorView& a, const TensorView& b) { return a.name < b.name; });
  out.owner = owners;
  return out;
}

}  // namespace

TensorSet parse_safetensors(const void* data, size_t size, const std::string& name, std::shared_ptr<void> owner) {
  const auto* bytes = static_cast<const std::byte*>(data);
  if (size < 8)
    throw Error(name + ": " + std::to_string(size) + " bytes, too short for the 8-byte header length",
                "the file is truncated or not a safetensors file");
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes, 8);
  if (header_len > size - 8)
    throw Error(name + ": header length " + std::to_string(header_len) + " exceeds the file (" + std::to_string(size) + " bytes)",
                "the file is truncated or not a safetensors file");
  if (header_len > kMaxHeaderBytes)
    throw Error(name + ": header length " + std::to_string(header_len) + " is over the 100 MB limit", kCorruptHint);
  if (header_len < 2) throw Error(name + ": header length " + std::to_string(header_len) + " is too short for a JSON object", kCorruptHint);

  const char* hb = reinterpret_cast<const char*>(bytes + 8);
  json header;
  try {
    header = json_input::parse(std::string_view(hb, header_len), name + ": header", json_input::file_limits());
  } catch (const json_input::Error& e) {
    throw Error(e.what(), !e.hinted() ? "the file is corrupt or not a safetensors file" : "");
  }
  if (!header.is_object())
    throw Error(name + ": header must be a JSON object, got " + std::string(header.type_name()), kCorruptHint);

  const std::byte* data_region = bytes + 8 + header_len;
  const uint64_t data_len = size - 8 - header_len;
  TensorSet out;
  std::vector<Entry> entries;
  entries.reserve(header.size());
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) throw Error(name + ": __metadata__ must be an object of strings, got " + short_json(value), kCorruptHint);
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string())
          throw Error(name + ": __metadata__['" + mk + "'] must be a string, got " + short_json(mv),
                      "safetensors metadata maps strings to strings");
        out.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(name, key, value, data_region, data_len));
  }

  // Tensors may not share bytes (empty tensors take none).
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const Entry* prev = nullptr;
  for (const auto& e : entries) {
    if (e.begin == e.end) continue;
    if (prev && e.begin < prev->end)
      throw Error(name + ": tensor '" + e.view.name + "' (data_offsets [" + std::to_string(e.begin) + ", " +
                      std::to_string(e.end) + "]) overlaps tensor '" + prev->view.name + "' ([" + std::to_string(prev->begin) +
                      ", " + std::to_string(prev->end) + "])",
                  kCorruptHint);
    prev = &e;
  }

  out.tensors.reserve(entries.size());
  for (auto& e : entries) out.tensors.push_back(std::move(e.view));
  std::sort(out.tensors.begin(), out.tensors.end(), [](const TensorView& a, const TensorView& b) { return a.name < b.name; });
  out.owner = std::move(owner);
  return out;
}

TensorSet read_safetensors(const fs::path& file) {
  auto mapping = detail::map_file(file);
  return parse_safetensors(mapping->data(), mapping->size(), file.string(), mapping);
}

TensorSet read_safetensors_dir(const fs::path& dir) {
  std::error_code ec;
  if (fs::is_regular_file(dir, ec)) return dir.extension() == ".json" ? read_sharded(dir) : read_safetensors(dir);
  if (!fs::is_directory(dir, ec)) throw Error(dir.string() + ": no such directory", "pass a model directory or a .safetensors file");
  if (fs::exists(dir / "model.safetensors", ec)) return read_safetensors(dir / "model.safetensors");
  if (fs::exists(dir / "model.safetensors.index.json", ec)) return read_sharded(dir / "model.safetensors.index.json");

  std::vector<std::string> present;
  for (const auto& entry : fs::directory_iterator(dir, ec)) present.push_back(entry.path().filename().string());
  std::sort(present.begin(), present.end());
  std::string listing;
  for (size_t i = 0; i < present.size() && i < 20; ++i) listing += (i ? ", " : "") + present[i];
  if (present.size() > 20) listing += ", ... (" + std::to_string(present.size()) + " entries)";
  throw Error(dir.string() + ": neither model.safetensors nor model.safetensors.index.json (the directory holds: " +
                  (listing.empty() ? "nothing" : listing) + ")",
              "save the weights as safetensors (save_pretrained(safe_serialization=True)); a .gguf file loads with read_gguf");
}

}  // namespace rl::model
