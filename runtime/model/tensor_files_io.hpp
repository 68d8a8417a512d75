// Internal to runtime/model: what the tensor-file readers and writers (tensor_files.hpp) share —
// read-only file mappings, atomic file writes, overflow checks, and short
// descriptions of JSON values for error messages.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace rl::model::detail {

// A whole file mapped read-only; munmap on destruction. Empty files map to
// data() == nullptr, size() == 0.
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& file);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  std::string name_;
};

std::shared_ptr<MappedFile> map_file(const std::filesystem::path& file);

// a * b, or false when it overflows.
inline bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }

// Writes a file atomically: the bytes go to `<file>.tmp.<pid>`; commit() fsyncs
// it, renames it over `file` and fsyncs the directory. Destroyed uncommitted
// (an exception on the way), it removes the temp file.
class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path file);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  void commit();
  const std::filesystem::path& temp_path() const { return tmp_; }

 private:
  std::filesystem::path file_, tmp_;
  int fd_ = -1;
};

// A JSON value for an error message: scalars as written, containers as their
// size (or their scalar elements when few). Never recurses past one level, so a
// hostile, deeply nested header cannot exhaust the stack.
std::string json_brief(const nlohmann::json& v);

}  // namespace rl::model::detail
