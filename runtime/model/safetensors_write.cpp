// Writing safetensors the way Hugging Face does: one file, or shards plus
// model.safetensors.index.json; every file written to a temp name and renamed.
// write_safetensors_dir takes every tensor at once; SafetensorsStream takes
// them one at a time. Both share the checks, the header, the split and the index.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>
#include <utility>

#include "base/errors.hpp"
#include "model/tensor_files.hpp"
#include "model/tensor_files_io.hpp"
#include "model/weight_buckets.hpp"

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

// A tensor's name and shape as a header can hold them: returns its element
// count. `seen` collects the names so far, to catch duplicates.
uint64_t check_name_and_shape(const std::string& where, const std::string& name, const std::vector<int64_t>& shape,
                              std::set<std::string>& seen) {
  const std::string what = where + ": tensor '" + name + "'";
  if (name.empty()) throw Error(where + ": a tensor has an empty name");
  if (name == "__metadata__") throw Error(what + ": the name is reserved for the metadata", "rename the tensor");
  if (!seen.insert(name).second) throw Error(what + " is given twice", "tensor names must be unique");
  uint64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) throw Error(what + ": negative dimension " + std::to_string(d));
    if (detail::mul_overflows(numel, uint64_t(d), &numel)) throw Error(what + ": shape overflows");
  }
  return numel;
}

// Checks what the caller hands in before any byte reaches the disk.
void check_tensors(const std::string& where, const std::vector<TensorToWrite>& tensors) {
  std::set<std::string> seen;
  for (const auto& t : tensors) {
    const uint64_t numel = check_name_and_shape(where, t.name, t.shape, seen);
    const std::string what = where + ": tensor '" + t.name + "'";
    uint64_t nbytes = 0;
    if (detail::mul_overflows(numel, dtype_size(t.dtype), &nbytes) || nbytes != t.nbytes)
      throw Error(what + ": nbytes is " + std::to_string(t.nbytes) + " but " + dtype_name(t.dtype) + " with " +
                      std::to_string(numel) + " elements needs " + std::to_string(nbytes),
                  "shape, dtype and nbytes must agree");
    if (t.nbytes > 0 && !t.data) throw Error(what + ": data is null");
  }
}

// The specs of a stream, checked as check_tensors does, as tensors whose
// sizes are known and whose data is still to come (null).
std::vector<TensorToWrite> checked_specs(const std::string& where, std::vector<TensorSpec> specs) {
  std::set<std::string> seen;
  std::vector<TensorToWrite> out;
  out.reserve(specs.size());
  for (auto& s : specs) {
    const uint64_t numel = check_name_and_shape(where, s.name, s.shape, seen);
    uint64_t nbytes = 0;
    if (detail::mul_overflows(numel, dtype_size(s.dtype), &nbytes) || nbytes > SIZE_MAX)
      throw Error(where + ": tensor '" + s.name + "': shape overflows");
    out.push_back({std::move(s.name), s.dtype, std::move(s.shape), nullptr, size_t(nbytes)});
  }
  return out;
}

// The header of a file whose data region holds `order`, in that order, padded
// with spaces to 8 bytes so that the data starts aligned.
std::string header_text(const std::string& where, const std::vector<const TensorToWrite*>& order,
                        const std::map<std::string, std::string>& metadata) {
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
  return text;
}

// The 8-byte length and the header: everything before the data.
void write_header(detail::AtomicFile& out, const std::string& text) {
  const uint64_t header_len = text.size();
  out.write(&header_len, 8);
  out.write(text.data(), text.size());
}

void make_dir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir, ec)) throw Error(dir.string() + ": cannot create the directory" + (ec ? " (" + ec.message() + ")" : ""));
}

// One file of a save: its name and the tensors [begin, end) it holds.
struct FilePart {
  std::string name;
  size_t begin = 0, end = 0;
};

// model.safetensors when everything fits in max_shard_bytes; else a greedy
// split in the caller's order (transformers' split_torch_state_dict_into_shards):
// a new shard starts when the next tensor would overflow the current one; a
// tensor bigger than the limit gets a shard of its own.
std::vector<FilePart> plan_files(const std::vector<TensorToWrite>& tensors, size_t max_shard_bytes) {
  uint64_t total = 0;
  for (const auto& t : tensors) total += t.nbytes;
  if (total <= max_shard_bytes) return {{kSingleName, 0, tensors.size()}};
  std::vector<FilePart> parts(1);
  uint64_t current = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (parts.back().end > parts.back().begin && current + tensors[i].nbytes > max_shard_bytes) {
      parts.push_back({{}, i, i});
      current = 0;
    }
    parts.back().end = i + 1;
    current += tensors[i].nbytes;
  }
  for (size_t i = 0; i < parts.size(); ++i) parts[i].name = shard_name(i + 1, parts.size());
  return parts;
}

// Even one shard gets an index when a tensor alone is past the limit.
bool is_sharded(const std::vector<FilePart>& files) { return files.front().name != kSingleName; }

void write_index(const fs::path& dir, const std::vector<TensorToWrite>& tensors, const std::vector<FilePart>& files) {
  uint64_t total = 0;
  json weight_map = json::object();
  for (const auto& f : files)
    for (size_t i = f.begin; i < f.end; ++i) {
      weight_map[tensors[i].name] = f.name;
      total += tensors[i].nbytes;
    }
  const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  const std::string text = index.dump(2) + "\n";
  detail::AtomicFile out(dir / kIndexName);
  out.write(text.data(), text.size());
  out.commit();
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

// Once every file of the save is in place: the index when sharded (after the
// shards, so it never names a missing one), then the stale files go. Returns
// the files of the save.
std::vector<fs::path> complete_dir(const fs::path& dir, const std::vector<TensorToWrite>& tensors,
                                   const std::vector<FilePart>& files) {
  std::vector<fs::path> written;
  std::set<std::string> keep;
  for (const auto& f : files) {
    written.push_back(dir / f.name);
    keep.insert(f.name);
  }
  if (is_sharded(files)) {
    write_index(dir, tensors, files);
    written.push_back(dir / kIndexName);
    keep.insert(kIndexName);
  }
  remove_stale(dir, keep);
  return written;
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
  const std::string text = header_text(where, order, metadata);

  detail::AtomicFile out(file);
  write_header(out, text);
  for (const auto* t : order) out.write(t->data, t->nbytes);
  out.commit();
}

std::string encode_safetensors(const std::vector<TensorToWrite>& tensors,
                               const std::map<std::string, std::string>& metadata, std::string into) {
  const std::string where = "safetensors bytes";
  check_tensors(where, tensors);
  // The caller's order (a bucket of a weight update); aligned when one dtype.
  std::vector<const TensorToWrite*> order;
  uint64_t data = 0;
  for (const auto& t : tensors) {
    order.push_back(&t);
    data += t.nbytes;
  }
  const std::string text = header_text(where, order, metadata);
  std::string out = std::move(into);
  out.clear();
  out.reserve(8 + text.size() + data);
  const uint64_t header_len = text.size();
  out.append(reinterpret_cast<const char*>(&header_len), 8);
  out += text;
  for (const auto* t : order) out.append(static_cast<const char*>(t->data), t->nbytes);
  return out;
}

std::vector<fs::path> write_safetensors_dir(const fs::path& dir, const std::vector<TensorToWrite>& tensors,
                                            size_t max_shard_bytes, const std::map<std::string, std::string>& metadata) {
  if (max_shard_bytes == 0) throw Error(dir.string() + ": max_shard_bytes must be positive");
  check_tensors(dir.string(), tensors);
  make_dir(dir);
  const std::vector<FilePart> files = plan_files(tensors, max_shard_bytes);
  for (const auto& f : files)
    write_safetensors(dir / f.name, {tensors.begin() + f.begin, tensors.begin() + f.end}, metadata);
  return complete_dir(dir, tensors, files);
}

// The stream writes the files of plan_files one after another, so that one
// file descriptor is open at a time. The last file stays at its temp name until
// finish() commits it; each earlier one, once complete, is committed (fsync,
// close) to a staging name and renamed into place by finish(), so no final name
// changes before then.
struct SafetensorsStream::Impl {
  fs::path dir;
  std::vector<TensorToWrite> tensors;  // the specs, data null
  std::vector<FilePart> files;
  std::vector<std::string> headers;  // one per file, laid out up front
  size_t next = 0;                   // the tensor write() expects
  size_t file = 0;                   // the file being written
  std::unique_ptr<detail::AtomicFile> out;
  std::vector<std::pair<fs::path, fs::path>> staged;  // (staging name, final name) of complete files
  bool broken = false, finished = false;

  Impl(const fs::path& d, std::vector<TensorSpec> specs, size_t max_shard_bytes,
       const std::map<std::string, std::string>& metadata)
      : dir(d) {
    if (max_shard_bytes == 0) throw Error(dir.string() + ": max_shard_bytes must be positive");
    tensors = checked_specs(dir.string(), std::move(specs));
    files = plan_files(tensors, max_shard_bytes);
    for (const auto& f : files) {
      std::vector<const TensorToWrite*> order;
      for (size_t i = f.begin; i < f.end; ++i) order.push_back(&tensors[i]);
      headers.push_back(header_text((dir / f.name).string(), order, metadata));
    }
    make_dir(dir);
    open(0);
  }

  ~Impl() {
    out.reset();  // removes the temp file of an unfinished save
    for (const auto& s : staged) remove_if_exists(s.first);
  }

  std::string file_where() const { return (dir / files[file].name).string(); }

  // The staging name keeps ".tmp." like AtomicFile's temp names: a leftover
  // (after a crash) is recognisably one and never mistaken for a shard.
  fs::path staging_path(const fs::path& final_path) const {
    fs::path p = final_path;
    p += ".tmp." + std::to_string(::getpid()) + ".staged";
    return p;
  }

  void open(size_t i) {
    file = i;
    const fs::path final_path = dir / files[i].name;
    const bool last = i + 1 == files.size();
    out = std::make_unique<detail::AtomicFile>(last ? final_path : staging_path(final_path));
    write_header(*out, headers[i]);
  }

  // A file other than the last is complete: off to its staging name, on to the next.
  void stage_and_open_next() {
    out->commit();
    out.reset();
    const fs::path final_path = dir / files[file].name;
    staged.emplace_back(staging_path(final_path), final_path);
    open(file + 1);
  }

  void rename_staged() {
    for (const auto& [from, to] : staged) {
      std::error_code ec;
      fs::rename(from, to, ec);
      if (ec) throw Error("cannot rename " + from.string() + " to " + to.string() + " (" + ec.message() + ")");
    }
    staged.clear();
  }

  // A failed write or rename leaves the save half done: the stream refuses to go on.
  template <class F>
  void io(F&& f) {
    try {
      f();
    } catch (...) {
      broken = true;
      throw;
    }
  }

  void check_usable() const {
    if (finished) throw Error(dir.string() + ": the safetensors stream is already finished", "start a new SafetensorsStream");
    if (broken)
      throw Error(dir.string() + ": an earlier write of this safetensors stream failed", "start a new SafetensorsStream");
  }

  // The tensor `name` may come now, with these bytes; nothing is written otherwise.
  void check_next(const std::string& name, const void* data, size_t nbytes) const {
    const std::string where = file_where();
    if (next == tensors.size())
      throw Error(where + ": tensor '" + name + "' comes after all " + std::to_string(tensors.size()) + " tensors",
                  "only the tensors of the specs can be written; call finish()");
    const TensorToWrite& t = tensors[next];
    if (name != t.name)
      throw Error(where + ": expected tensor '" + t.name + "' next, got '" + name + "'",
                  "write the tensors in the order of the specs");
    if (nbytes != t.nbytes)
      throw Error(where + ": tensor '" + name + "': got " + std::to_string(nbytes) + " bytes but " + dtype_name(t.dtype) +
                      " " + json(t.shape).dump() + " needs " + std::to_string(t.nbytes),
                  "the bytes must match the spec's dtype and shape");
    if (nbytes > 0 && !data) throw Error(where + ": tensor '" + name + "': data is null");
  }

  void check_complete() const {
    if (next == tensors.size()) return;
    const size_t more = tensors.size() - next - 1;
    throw Error(dir.string() + ": tensor '" + tensors[next].name + "' was never written" +
                    (more ? " (nor " + std::to_string(more) + " after it)" : ""),
                "write every tensor of the specs before finish()");
  }
};

SafetensorsStream::SafetensorsStream(const fs::path& dir, std::vector<TensorSpec> specs, size_t max_shard_bytes,
                                     const std::map<std::string, std::string>& metadata)
    : impl_(std::make_unique<Impl>(dir, std::move(specs), max_shard_bytes, metadata)) {}

SafetensorsStream::~SafetensorsStream() = default;

void SafetensorsStream::write(const std::string& name, const void* data, size_t nbytes) {
  Impl& s = *impl_;
  s.check_usable();
  s.check_next(name, data, nbytes);
  s.io([&] {
    s.out->write(data, nbytes);
    ++s.next;
    if (s.next == s.files[s.file].end && s.file + 1 < s.files.size()) s.stage_and_open_next();
  });
}

std::vector<fs::path> SafetensorsStream::finish() {
  Impl& s = *impl_;
  s.check_usable();
  s.check_complete();
  std::vector<fs::path> written;
  s.io([&] {
    s.rename_staged();
    s.out->commit();  // the last file, and (fsync of the directory) the renames before it
    s.out.reset();
    written = complete_dir(s.dir, s.tensors, s.files);
  });
  s.finished = true;
  return written;
}

}  // namespace rl::model
