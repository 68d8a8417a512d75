#include <algorithm>
#include "nn/shared_weights.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <unordered_map>

#include "base/errors.hpp"
#include "nn/weights.hpp"

namespace rl::nn {

using nlohmann::json;

struct SharedMapping {
  void* base = nullptr;
  size_t bytes = 0;
  std::string path;
  bool owner = false;  // the owner removes the file (if the writer has not) when the last user goes

  ~SharedMapping() {
    if (base) munmap(base, bytes);
    if (owner) unlink(path.c_str());
  }
  char* at(int64_t off) const { return static_cast<char*>(base) + off; }
};

namespace {

constexpr int64_t kAlign = 64;

std::string random_hex() {
  std::random_device rd;
  const uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string mib(int64_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB"; }

// A storage-held pointer into the mapping that keeps the mapping alive.
c10::DataPtr pointer_into(const std::shared_ptr<SharedMapping>& m, int64_t off) {
  auto* keep = new std::shared_ptr<SharedMapping>(m);
  return c10::DataPtr(m->at(off), keep, [](void* p) { delete static_cast<std::shared_ptr<SharedMapping>*>(p); },
                      c10::Device(c10::kCPU));
}

// Creates `path` (0600, exclusive), reserves `bytes` and maps it shared.
std::shared_ptr<SharedMapping> create_mapping(const std::string& path, int64_t bytes) {
  const int fd = open(path.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) throw_errno("shared weights: creating " + path);
  auto m = std::make_shared<SharedMapping>();
  m->path = path;
  m->owner = true;  // from here on, failure removes the file
  if (const int rc = posix_fallocate(fd, 0, bytes); rc != 0) {
    close(fd);
    throw Error("shared weights: reserving " + mib(bytes) + " in " + path + ": " + std::strerror(rc),
                "the engine needs twice its weights in shared memory: enlarge /dev/shm (docker run --shm-size) "
                "or sync with method 'disk'");
  }
  void* p = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  const int err = errno;
  close(fd);
  if (p == MAP_FAILED) {
    errno = err;
    throw_errno("shared weights: mapping " + path);
  }
  m->base = p;
  m->bytes = static_cast<size_t>(bytes);
  return m;
}

int64_t element_size(const std::string& dtype) { return static_cast<int64_t>(c10::elementSize(parse_dtype(dtype))); }

// Bytes from a tensor's first element to one past its last (0 when empty).
int64_t extent_bytes(const SharedTensor& t) {
  int64_t last = 0;
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (t.shape[i] == 0) return 0;
    last += (t.shape[i] - 1) * t.stride[i];
  }
  return (last + 1) * element_size(t.dtype);
}

}  // namespace

// ---- layout ------------------------------------------------------------------------

json SharedLayout::to_json() const {
  json ts = json::array();
  for (const auto& t : tensors)
    ts.push_back({{"name", t.name}, {"dtype", t.dtype}, {"shape", t.shape}, {"stride", t.stride}, {"offset", t.offset}});
  return {{"id", id}, {"path", path}, {"buffer_bytes", buffer_bytes}, {"buffers", buffers}, {"active", active},
          {"tensors", ts}};
}

SharedLayout SharedLayout::from_json(const json& j) {
  const char* what = "shared weights layout";
  auto need = [&](const json& o, const char* key, const std::string& where) -> const json& {
    auto it = o.find(key);
    if (it == o.end() || it->is_null()) throw Error(std::string(what) + ": '" + where + key + "' is missing");
    return *it;
  };
  if (!j.is_object()) throw Error(std::string(what) + ": a JSON object expected");
  SharedLayout l;
  try {
    l.id = need(j, "id", "").get<std::string>();
    l.path = need(j, "path", "").get<std::string>();
    l.buffer_bytes = need(j, "buffer_bytes", "").get<int64_t>();
    l.buffers = need(j, "buffers", "").get<int>();
    l.active = need(j, "active", "").get<int>();
    const json& ts = need(j, "tensors", "");
    if (!ts.is_array()) throw Error(std::string(what) + ": 'tensors' must be a list");
    for (size_t i = 0; i < ts.size(); ++i) {
      const std::string at = "tensors[" + std::to_string(i) + "].";
      SharedTensor t;
      t.name = need(ts[i], "name", at).get<std::string>();
      t.dtype = need(ts[i], "dtype", at).get<std::string>();
      t.shape = need(ts[i], "shape", at).get<std::vector<int64_t>>();
      t.stride = need(ts[i], "stride", at).get<std::vector<int64_t>>();
      t.offset = need(ts[i], "offset", at).get<int64_t>();
      l.tensors.push_back(std::move(t));
    }
  } catch (const json::exception& e) {
    throw Error(std::string(what) + ": a field has the wrong type: " + e.what());
  }
  if (l.buffers < 1 || l.buffer_bytes < 0 || l.active < 0 || l.active >= l.buffers)
    throw Error(std::string(what) + ": buffers " + std::to_string(l.buffers) + ", buffer_bytes " +
                std::to_string(l.buffer_bytes) + ", active " + std::to_string(l.active) + " are inconsistent");
  for (const auto& t : l.tensors) {
    const std::string where = std::string(what) + ": tensor '" + t.name + "'";
    try {
      parse_dtype(t.dtype);
    } catch (const std::exception& e) {
      throw Error(where + ": " + e.what());
    }
    bool ok = t.shape.size() == t.stride.size() && t.offset >= 0 && t.offset % element_size(t.dtype) == 0;
    for (size_t i = 0; ok && i < t.shape.size(); ++i) ok = t.shape[i] >= 0 && t.stride[i] >= 0;
    if (!ok || t.offset + extent_bytes(t) > l.buffer_bytes)
      throw Error(where + " does not fit its buffer (offset " + std::to_string(t.offset) + ", " +
                  std::to_string(l.buffer_bytes) + " bytes per buffer)");
  }
  return l;
}

// ---- owner -------------------------------------------------------------------------

SharedWeights::SharedWeights(const std::vector<std::pair<std::string, torch::Tensor>>& params,
                             const std::string& dir) {
  std::unordered_map<const c10::StorageImpl*, size_t> index;
  int64_t bytes = 0;
  for (const auto& [name, t] : params) {
    if (!t.device().is_cpu())
      throw Error("shared weights: parameter '" + name + "' is on " + t.device().str(),
                  "shared-memory weight sync is for engines on the CPU; use method 'distributed' for GPU engines");
    const c10::Storage& st = t.storage();
    if (index.emplace(st.unsafeGetStorageImpl(), storages_.size()).second) {
      storages_.push_back(st);
      offsets_.push_back(bytes);
      bytes += (static_cast<int64_t>(st.nbytes()) + kAlign - 1) / kAlign * kAlign;
    }
  }
  layout_.id = random_hex();
  layout_.path = dir + "/rlhost-weights-" + std::to_string(getpid()) + "-" + layout_.id;
  layout_.buffer_bytes = bytes;
  map_ = create_mapping(layout_.path, bytes * layout_.buffers);
  for (size_t i = 0; i < storages_.size(); ++i)
    std::memcpy(map_->at(offsets_[i]), storages_[i].data(), storages_[i].nbytes());
  for (const auto& [name, t] : params) {
    const size_t i = index.at(t.storage().unsafeGetStorageImpl());
    layout_.tensors.push_back({name, dtype_config_name(t.scalar_type()), t.sizes().vec(), t.strides().vec(),
                               offsets_[i] + t.storage_offset() * static_cast<int64_t>(t.element_size())});
  }
  activate(0);
}

SharedWeights::~SharedWeights() = default;

void SharedWeights::activate(int k) {
  if (k < 0 || k >= layout_.buffers)
    throw Error("shared weights: buffer " + std::to_string(k) + " does not exist (0.." +
                std::to_string(layout_.buffers - 1) + ")");
  for (size_t i = 0; i < storages_.size(); ++i)
    storages_[i].unsafeGetStorageImpl()->set_data_ptr_noswap(pointer_into(map_, k * layout_.buffer_bytes + offsets_[i]));
  layout_.active = k;
}

torch::Tensor SharedWeights::view_in(int k, const torch::Tensor& live) const {
  if (k < 0 || k >= layout_.buffers)
    throw Error("shared weights: buffer " + std::to_string(k) + " does not exist (0.." +
                std::to_string(layout_.buffers - 1) + ")");
  for (size_t i = 0; i < storages_.size(); ++i) {
    if (storages_[i].unsafeGetStorageImpl() != live.storage().unsafeGetStorageImpl()) continue;
    char* base = map_->at(k * layout_.buffer_bytes + offsets_[i]) + live.storage_offset() * live.element_size();
    auto keep = map_;  // the view holds the mapping: sharing anew meanwhile unmaps nothing under it
    return torch::from_blob(base, live.sizes(), live.strides(), [keep](void*) {}, live.options().requires_grad(false));
  }
  throw std::logic_error("SharedWeights::view_in: a tensor outside the shared weights");
}

// ---- writer ------------------------------------------------------------------------

SharedWeightsWriter::SharedWeightsWriter(const SharedLayout& layout) : layout_(layout) {
  const int fd = open(layout_.path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0)
    throw_errno("shared weights: opening " + layout_.path +
                " (the engine's shared weights; if it is gone, the engine shared them anew or exited)");
  struct stat st {};
  const int64_t want = layout_.buffer_bytes * layout_.buffers;
  if (fstat(fd, &st) != 0 || st.st_size != want) {
    close(fd);
    throw Error("shared weights: " + layout_.path + " holds " + std::to_string(st.st_size) + " bytes, the layout says " +
                std::to_string(want));
  }
  void* p = want == 0 ? nullptr
                      : mmap(nullptr, static_cast<size_t>(want), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  const int err = errno;
  close(fd);
  if (p == MAP_FAILED) {
    errno = err;
    throw_errno("shared weights: mapping " + layout_.path);
  }
  map_ = std::make_shared<SharedMapping>();
  map_->base = p;
  map_->bytes = static_cast<size_t>(want);
  map_->path = layout_.path;
  // Both sides have it mapped: the name is no longer needed, and a crash of
  // either leaves nothing behind in /dev/shm.
  unlink(layout_.path.c_str());
}

void SharedWeightsWriter::write(int buffer, const std::vector<std::pair<std::string, torch::Tensor>>& src) {
  if (buffer < 0 || buffer >= layout_.buffers)
    throw Error("shared weights: buffer " + std::to_string(buffer) + " does not exist (0.." +
                std::to_string(layout_.buffers - 1) + ")");
  std::unordered_map<std::string, const torch::Tensor*> by_name;
  for (const auto& [name, t] : src) by_name.emplace(name, &t);
  if (by_name.size() != layout_.tensors.size() || src.size() != by_name.size()) {
    std::unordered_map<std::string, bool> known;
    for (const auto& t : layout_.tensors) known.emplace(t.name, true);
    for (const auto& [name, t] : src)
      if (!known.count(name))
        throw Error("shared weights: the trainer has '" + name + "' but the engine does not",
                    "sync a trainer of the engine's model");
  }
  torch::NoGradGuard ng;
  const int64_t base = buffer * layout_.buffer_bytes;
  for (const auto& t : layout_.tensors) {
    auto it = by_name.find(t.name);
    if (it == by_name.end())
      throw Error("shared weights: the engine has '" + t.name + "' but the trainer does not",
                  "sync a trainer of the engine's model");
    const torch::Tensor& s = *it->second;
    if (s.sizes().vec() != t.shape) {
      std::ostringstream os;
      os << "shared weights: '" << t.name << "' is " << s.sizes() << " in the trainer but " << c10::IntArrayRef(t.shape)
         << " in the engine";
      throw Error(os.str());
    }
    auto dst = torch::from_blob(map_->at(base + t.offset), t.shape, t.stride,
                                torch::TensorOptions().dtype(parse_dtype(t.dtype)));
    copy_weight(dst, s.detach());
  }
}

void SharedWeightsWriter::write_some(int buffer, const std::vector<std::pair<std::string, torch::Tensor>>& src) {
  if (buffer < 0 || buffer >= layout_.buffers)
    throw Error("shared weights: buffer " + std::to_string(buffer) + " does not exist (0.." +
                std::to_string(layout_.buffers - 1) + ")");
  torch::NoGradGuard ng;
  const int64_t base = buffer * layout_.buffer_bytes;
  for (const auto& [name, s] : src) {
    const auto it = std::find_if(layout_.tensors.begin(), layout_.tensors.end(),
                                 [&](const auto& t) { return t.name == name; });
    if (it == layout_.tensors.end())
      throw Error("shared weights: the trainer has '" + name + "' but the engine does not",
                  "sync a trainer of the engine's model");
    if (s.sizes().vec() != it->shape) {
      std::ostringstream os;
      os << "shared weights: '" << name << "' is " << s.sizes() << " in the trainer but " << c10::IntArrayRef(it->shape)
         << " in the engine";
      throw Error(os.str());
    }
    auto dst = torch::from_blob(map_->at(base + it->offset), it->shape, it->stride,
                                torch::TensorOptions().dtype(parse_dtype(it->dtype)));
    copy_weight(dst, s.detach());
  }
}

}  // namespace rl::nn
