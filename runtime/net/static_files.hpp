// The static files an HttpServer serves (rl.http.serve's static_dir, the trace
// viewer): regular files under one folder, nothing else.
//
// A request path maps to a file only when, percent-decoded, it holds no NUL
// byte (400: "x%00.html" must not serve "x") and no "." or ".." segment (400),
// and the file opens *beneath* the folder: openat2(RESOLVE_BENEATH) from a
// descriptor held since start, so a symlink (or a renamed parent) that leads
// outside does not open. Directories, FIFOs, devices and missing files are not
// ours: the request goes on to the server's handler (or its 404).
#pragma once

#include <optional>
#include <string>

namespace rl::net {

class StaticFiles {
 public:
  // Throws rl::Error when `dir` is not a directory we can open.
  StaticFiles(const std::string& dir, std::string mount);
  ~StaticFiles();
  StaticFiles(const StaticFiles&) = delete;
  StaticFiles& operator=(const StaticFiles&) = delete;

  struct Reply {
    int status = 200;
    std::string content_type;
    std::string body;
  };
  // `path`: the decoded request path. nullopt: not a file of ours.
  std::optional<Reply> serve(const std::string& method, const std::string& path) const;

  // By file extension; application/octet-stream when unknown.
  static const char* content_type(const std::string& name);

 private:
  int root_fd_ = -1;
  std::string mount_;  // "/" or "/prefix/"
};

}  // namespace rl::net
