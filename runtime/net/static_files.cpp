#include "net/static_files.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "base/errors.hpp"

namespace rl::net {
namespace {

constexpr size_t kMaxFileBytes = size_t{1} << 30;

// openat2 with RESOLVE_BENEATH; on kernels without it (before 5.6), a realpath
// check that the resolved file lies under the folder, then an O_NOFOLLOW open.
int open_beneath(int root_fd, const std::string& rel) {
  open_how how{};
  how.flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  const long fd = ::syscall(SYS_openat2, root_fd, rel.c_str(), &how, sizeof how);
  if (fd >= 0 || errno != ENOSYS) return static_cast<int>(fd);
  char root[PATH_MAX], file[PATH_MAX];
  const std::string self = "/proc/self/fd/" + std::to_string(root_fd);
  const ssize_t n = ::readlink(self.c_str(), root, sizeof root - 1);
  if (n <= 0) return -1;
  root[n] = '\0';
  const std::string joined = std::string(root) + "/" + rel;
  if (!::realpath(joined.c_str(), file)) return -1;
  const std::string prefix = std::string(root) + "/";
  if (std::strncmp(file, prefix.c_str(), prefix.size()) != 0) {
    errno = EXDEV;
    return -1;
  }
  return ::open(file, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW);
}

}  // namespace

StaticFiles::StaticFiles(const std::string& dir, std::string mount) : mount_(std::move(mount)) {
  if (mount_.empty() || mount_.front() != '/') mount_ = "/" + mount_;
  if (mount_.back() != '/') mount_ += '/';
  root_fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root_fd_ < 0) throw Error("static directory '" + dir + "' is not a directory we can open: " + std::strerror(errno),
                                "pass an existing directory");
}

StaticFiles::~StaticFiles() {
  if (root_fd_ >= 0) ::close(root_fd_);
}

const char* StaticFiles::content_type(const std::string& name) {
  static const std::pair<const char*, const char*> types[] = {
      {".html", "text/html; charset=utf-8"},    {".htm", "text/html; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"}, {".mjs", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},      {".json", "application/json"},
      {".map", "application/json"},             {".jsonl", "application/x-ndjson"},
      {".txt", "text/plain; charset=utf-8"},    {".md", "text/markdown; charset=utf-8"},
      {".wasm", "application/wasm"},            {".svg", "image/svg+xml"},
      {".png", "image/png"},                    {".jpg", "image/jpeg"},
      {".jpeg", "image/jpeg"},                  {".gif", "image/gif"},
      {".ico", "image/x-icon"},                 {".woff2", "font/woff2"},
      {".gz", "application/gzip"},              {".csv", "text/csv; charset=utf-8"},
  };
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos || name.find('/', dot) != std::string::npos) return "application/octet-stream";
  const std::string ext = name.substr(dot);
  for (const auto& [e, t] : types)
    if (strcasecmp(e, ext.c_str()) == 0) return t;
  return "application/octet-stream";
}

std::optional<StaticFiles::Reply> StaticFiles::serve(const std::string& method, const std::string& path) const {
  if (method != "GET" && method != "HEAD") return std::nullopt;
  if (path.size() + 1 < mount_.size() || path.compare(0, mount_.size() - 1, mount_, 0, mount_.size() - 1) != 0)
    return std::nullopt;
  std::string rel = path.substr(mount_.size() - 1);  // from the '/' after the mount
  if (!rel.empty() && rel.front() != '/') return std::nullopt;  // "/staticX" under mount "/static/"
  auto bad = [](const std::string& why) { return Reply{400, "text/plain; charset=utf-8", "bad path: " + why + "\n"}; };
  if (rel.find('\0') != std::string::npos) return bad("it holds a NUL byte");
  // Segments: no ".", no ".."; empty ones ("//") are dropped.
  std::string clean;
  size_t i = 0;
  while (i <= rel.size()) {
    const size_t j = std::min(rel.find('/', i), rel.size());
    const std::string seg = rel.substr(i, j - i);
    if (seg == "." || seg == "..") return bad("'" + seg + "' segments are not served");
    if (!seg.empty()) clean += (clean.empty() ? "" : "/") + seg;
    i = j + 1;
  }
  if (clean.empty() || rel.back() == '/') clean += clean.empty() ? "index.html" : "/index.html";
  const int fd = open_beneath(root_fd_, clean);
  if (fd < 0) return std::nullopt;  // missing, outside the folder, unreadable: not ours
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<size_t>(st.st_size) > kMaxFileBytes) {
    ::close(fd);
    return std::nullopt;
  }
  Reply r;
  r.content_type = content_type(clean);
  r.body.resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < r.body.size()) {
    const ssize_t n = ::read(fd, r.body.data() + got, r.body.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  r.body.resize(got);
  return r;
}

}  // namespace rl::net
