// What the safetensors and GGUF code shares: dtypes, tensor sets, file mappings,
// atomic writes, and the check of a tensor set against a config.
#include "model/tensor_files.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <unordered_map>

#include "base/errors.hpp"
#include "model/tensor_files_io.hpp"

namespace rl::model {

namespace {

struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::F32, "F32", 4}, {DType::F16, "F16", 2}, {DType::BF16, "BF16", 2}, {DType::F64, "F64", 8},
    {DType::I64, "I64", 8}, {DType::I32, "I32", 4}, {DType::I16, "I16", 2},   {DType::I8, "I8", 1},
    {DType::U8, "U8", 1},   {DType::BOOL, "BOOL", 1},
};

const DTypeInfo& info(DType d) {
  for (const auto& i : kDTypes)
    if (i.dtype == d) return i;
  throw Error("unknown DType value " + std::to_string(int(d)));
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool is_float(DType d) { return d == DType::F32 || d == DType::F16 || d == DType::BF16 || d == DType::F64; }

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The file a set came from, for messages about what it lacks: the one file, or
// the directory of several shards.
std::string set_source(const TensorSet& set) {
  if (set.tensors.empty()) return "checkpoint (no tensors)";
  const std::string& first = set.tensors.front().file;
  for (const auto& t : set.tensors)
    if (t.file != first) return std::filesystem::path(first).parent_path().string() + "/ (sharded checkpoint)";
  return first;
}

}  // namespace

const char* dtype_name(DType d) { return info(d).name; }
size_t dtype_size(DType d) { return info(d).size; }

DType dtype_from_name(const std::string& s, const std::string& where) {
  for (const auto& i : kDTypes)
    if (s == i.name) return i.dtype;
  throw Error(where + ": unsupported dtype '" + s + "'", "expected one of F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL");
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const TensorView* TensorSet::find(const std::string& name) const {
  auto it = std::lower_bound(tensors.begin(), tensors.end(), name,
                             [](const TensorView& t, const std::string& n) { return t.name < n; });
  return it != tensors.end() && it->name == name ? &*it : nullptr;
}

void validate_tensors(const TensorSet& set, const ModelConfig& config) {
  struct Problem {
    std::string file, what, hint;
  };
  std::vector<Problem> problems;
  const std::string source = set_source(set);
  const auto expected = config.expected_tensors();
  std::unordered_map<std::string, const std::vector<int64_t>*> wanted;
  for (const auto& spec : expected) wanted[spec.name] = &spec.shape;
  const std::vector<int64_t> lm_head_shape{config.vocab_size, config.hidden_size};

  for (const auto& spec : expected) {
    if (set.find(spec.name)) continue;
    problems.push_back({source, "missing tensor '" + spec.name + "' (expected shape " + shape_str(spec.shape) + ")",
                        "the weights do not match the config (num_hidden_layers, tie_word_embeddings, attention_bias, "
                        "architecture); are config.json and the weights from the same model?"});
  }
  for (const auto& t : set.tensors) {
    const std::vector<int64_t>* shape = nullptr;
    if (auto it = wanted.find(t.name); it != wanted.end()) {
      shape = it->second;
    } else if (t.name == "lm_head.weight" && config.tie_word_embeddings) {
      shape = &lm_head_shape;  // present but unused: embeddings are tied
    } else if (ends_with(t.name, ".rotary_emb.inv_freq")) {
      continue;  // a buffer older transformers saved; recomputed from the config
    } else {
      problems.push_back({t.file, "unexpected tensor '" + t.name + "' " + shape_str(t.shape),
                          config.architecture + " with this config has no such weight; is the architecture in "
                                                "config.json right?"});
      continue;
    }
    if (t.shape != *shape) {
      problems.push_back({t.file, "tensor '" + t.name + "' has shape " + shape_str(t.shape) + ", the config expects " +
                                      shape_str(*shape),
                          "check hidden_size, intermediate_size, vocab_size, num_attention_heads, "
                          "num_key_value_heads and head_dim in config.json"});
    } else if (!is_float(t.dtype)) {
      problems.push_back({t.file, "tensor '" + t.name + "' has dtype " + dtype_name(t.dtype),
                          "model weights must be floating point (F32, F16, BF16 or F64)"});
    }
  }
  if (problems.empty()) return;
  std::string what = problems[0].file + ": " + problems[0].what;
  if (problems.size() > 1) {
    what += " (and " + std::to_string(problems.size() - 1) + " more: ";
    for (size_t i = 1; i < problems.size() && i <= 3; ++i) what += (i > 1 ? "; " : "") + problems[i].what;
    what += problems.size() > 4 ? "; ...)" : ")";
  }
  throw Error(what, problems[0].hint);
}

namespace detail {

MappedFile::MappedFile(const std::filesystem::path& file) : name_(file.string()) {
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) throw Error(name_ + ": no such file");
    throw_errno(name_ + ": cannot open");
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    errno = e;
    throw_errno(name_ + ": cannot stat");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(name_ + ": not a regular file");
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      errno = e;
      throw_errno(name_ + ": cannot mmap " + std::to_string(size_) + " bytes");
    }
    data_ = static_cast<const std::byte*>(p);
  }
  ::close(fd);  // the mapping stays valid
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<std::byte*>(data_), size_);
}

std::string json_brief(const nlohmann::json& v) {
  auto scalar = [](const nlohmann::json& x) {
    std::string s = x.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return s.size() > 40 ? s.substr(0, 37) + "..." : s;
  };
  if (v.is_object()) return "an object of " + std::to_string(v.size()) + " keys";
  if (!v.is_array()) return scalar(v);
  if (v.size() > 8) return "an array of " + std::to_string(v.size()) + " elements";
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i].is_structured()) return "an array of " + std::to_string(v.size()) + " elements";
    out += (i ? "," : "") + scalar(v[i]);
  }
  return out + "]";
}

std::shared_ptr<MappedFile> map_file(const std::filesystem::path& file) { return std::make_shared<MappedFile>(file); }

AtomicFile::AtomicFile(std::filesystem::path file) : file_(std::move(file)) {
  tmp_ = file_;
  tmp_ += ".tmp." + std::to_string(::getpid());
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_errno(tmp_.string() + ": cannot create");
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd_, p, std::min(n, size_t(1) << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      throw_errno(tmp_.string() + ": write failed");
    }
    p += w;
    n -= size_t(w);
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) throw_errno(tmp_.string() + ": fsync failed");
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw_errno(tmp_.string() + ": close failed");
  if (::rename(tmp_.c_str(), file_.c_str()) != 0) throw_errno("cannot rename " + tmp_.string() + " to " + file_.string());
  tmp_.clear();
  // Make the rename itself durable.
  std::filesystem::path dir = file_.parent_path();
  if (dir.empty()) dir = ".";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace detail
void write_file_atomic(const std::filesystem::path& file, std::string_view bytes) {
  detail::AtomicFile out(file);
  out.write(bytes.data(), bytes.size());
  out.commit();
}

}  // namespace rl::model
