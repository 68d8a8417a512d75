// An append-only file for metric sinks: each write() is one write(2) call on an
// O_APPEND descriptor (retried only on a short write), so a record lands whole
// and in one piece at the end of the file, even when another process appends too.
// Errors name the file and carry the sink's hint.
#pragma once

#include <string>
#include <string_view>

namespace rl::metrics {

// Creates `dir` and its parents. Throws rl::Error "<what>: cannot create
// directory '<dir>': <reason> (hint: <hint>)".
void create_directories(const std::string& dir, std::string_view what, std::string_view hint);

class AppendFile {
 public:
  AppendFile() = default;
  // Opens `path` for appending (creating it; with `exclusive`, failing if it
  // exists). `what` and `hint` go into error messages.
  AppendFile(std::string path, bool exclusive, std::string_view what, std::string_view hint);
  AppendFile(AppendFile&& o) noexcept;
  AppendFile& operator=(AppendFile&& o) noexcept;
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;
  ~AppendFile();

  // Appends all of `data`; throws rl::Error naming the path on failure (disk full, ...).
  void write(std::string_view data);
  void close();
  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
  std::string what_;
};

}  // namespace rl::metrics
