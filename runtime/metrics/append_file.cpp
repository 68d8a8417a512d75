#include "metrics/append_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "base/errors.hpp"

namespace rl::metrics {

void create_directories(const std::string& dir, std::string_view what, std::string_view hint) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  // create_directories reports no error for an existing directory, but an existing
  // *file* of that name must fail here rather than later at open().
  if (!ec && !std::filesystem::is_directory(dir, ec) && !ec) ec = std::make_error_code(std::errc::not_a_directory);
  if (ec)
    throw Error(std::string(what) + ": cannot create directory '" + dir + "': " + ec.message(), std::string(hint));
}

AppendFile::AppendFile(std::string path, bool exclusive, std::string_view what, std::string_view hint)
    : path_(std::move(path)), what_(what) {
  int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC;
  if (exclusive) flags |= O_EXCL;
  do {
    fd_ = ::open(path_.c_str(), flags, 0644);
  } while (fd_ < 0 && errno == EINTR);
  if (fd_ < 0)
    throw Error(what_ + ": cannot open '" + path_ + "' for appending: " + std::strerror(errno), std::string(hint));
}

AppendFile::AppendFile(AppendFile&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), path_(std::move(o.path_)), what_(std::move(o.what_)) {}

AppendFile& AppendFile::operator=(AppendFile&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = std::exchange(o.fd_, -1);
    path_ = std::move(o.path_);
    what_ = std::move(o.what_);
  }
  return *this;
}

AppendFile::~AppendFile() { close(); }

void AppendFile::write(std::string_view data) {
  if (fd_ < 0) throw Error(what_ + ": '" + path_ + "' is closed");
  while (!data.empty()) {
    const ssize_t n = ::write(fd_, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(what_ + ": cannot write to '" + path_ + "': " + std::strerror(errno));
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
}

void AppendFile::close() {
  if (fd_ >= 0) ::close(std::exchange(fd_, -1));
}

}  // namespace rl::metrics
