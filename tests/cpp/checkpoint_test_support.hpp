// Helpers for the config / safetensors / GGUF tests (header-only).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace rl::test {

// A fresh directory under $TMPDIR, removed with everything in it.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "ckpt") {
    static std::mt19937_64 rng{std::random_device{}()};
    path_ = std::filesystem::temp_directory_path() /
            ("rlhost-test-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(rng() % 1000000007));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

inline std::vector<std::byte> read_bytes(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::vector<std::byte> out(in ? std::filesystem::file_size(file) : 0);
  in.read(reinterpret_cast<char*>(out.data()), std::streamsize(out.size()));
  out.resize(size_t(in.gcount()));
  return out;
}

inline void write_bytes(const std::filesystem::path& file, const void* data, size_t n) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), std::streamsize(n));
}

inline void write_text(const std::filesystem::path& file, const std::string& text) {
  write_bytes(file, text.data(), text.size());
}

// Names in `dir` (not recursive), sorted.
inline std::vector<std::string> list_dir(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace rl::test
