#include "host/control_registry.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/errors.hpp"
#include "base/json_input.hpp"

namespace fs = std::filesystem;

namespace rl::control {

std::string runtime_dir() {
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg && *xdg) return (fs::path(xdg) / "rlhost").string();
  return "/tmp/rlhost-" + std::to_string(::getuid());
}

std::string ensure_runtime_dir() {
  const std::string dir = runtime_dir();
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    // $XDG_RUNTIME_DIR itself may be missing (a stale variable): create parents.
    std::error_code ec;
    fs::create_directories(fs::path(dir).parent_path(), ec);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) throw_errno("cannot create control directory " + dir);
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) throw_errno("cannot stat control directory " + dir);
  if (!S_ISDIR(st.st_mode))
    throw Error("control directory " + dir + " is not a directory", "remove it, or set XDG_RUNTIME_DIR");
  if (st.st_uid != ::getuid())
    throw Error("control directory " + dir + " belongs to uid " + std::to_string(st.st_uid) + ", not to us",
                "another user planted it; remove it or set XDG_RUNTIME_DIR");
  if ((st.st_mode & 0077) != 0 && ::chmod(dir.c_str(), 0700) != 0)
    throw_errno("cannot make control directory " + dir + " private (chmod 0700)");
  return dir;
}

std::string default_socket_path(int pid) { return runtime_dir() + "/" + std::to_string(pid) + ".sock"; }

std::string iso_time_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

nlohmann::json record_to_json(const ProcessRecord& r) {
  return nlohmann::json{{"pid", r.pid},         {"script", r.script},         {"argv", r.argv},
                        {"started_at", r.started_at}, {"cwd", r.cwd},       {"socket", r.socket},
                        {"tcp_port", r.tcp_port},     {"token_file", r.token_file}, {"version", r.version}};
}

std::optional<ProcessRecord> read_record(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j;
  try {
    j = json_input::parse(ss.str(), path);
  } catch (const json_input::Error&) {
    return std::nullopt;  // not a record (a half-written or foreign file)
  }
  if (!j.is_object() || !j.contains("pid") || !j["pid"].is_number_integer()) return std::nullopt;
  ProcessRecord r;
  r.pid = j["pid"].get<int>();
  auto str = [&](const char* k) { return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : ""; };
  r.script = str("script");
  r.started_at = str("started_at");
  r.cwd = str("cwd");
  r.socket = str("socket");
  r.token_file = str("token_file");
  r.version = str("version");
  if (j.contains("tcp_port") && j["tcp_port"].is_number_integer()) r.tcp_port = j["tcp_port"].get<int>();
  if (j.contains("argv") && j["argv"].is_array())
    for (auto& a : j["argv"])
      if (a.is_string()) r.argv.push_back(a.get<std::string>());
  r.record_path = path;
  return r;
}

void write_private_file(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  FILE* f = nullptr;
  {
    // Create with 0600 from the start: never a moment where others could read it.
    const mode_t old = ::umask(0077);
    f = std::fopen(tmp.c_str(), "w");
    ::umask(old);
  }
  if (!f) throw_errno("cannot write " + tmp);
  const bool ok = std::fwrite(content.data(), 1, content.size(), f) == content.size();
  if (std::fclose(f) != 0 || !ok) {
    ::unlink(tmp.c_str());
    throw_errno("cannot write " + tmp);
  }
  ::chmod(tmp.c_str(), 0600);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    errno = e;
    throw_errno("cannot rename " + tmp + " to " + path);
  }
}

bool pid_alive(int pid) {
  if (pid <= 0) return false;
  return ::kill(pid, 0) == 0 || errno == EPERM;
}

int connect_unix(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) {
    errno = ENAMETOOLONG;
    return -1;
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

namespace {

bool is_socket(const std::string& path) {
  struct stat st {};
  return !path.empty() && ::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

// A socket nobody accepts on: its process died without cleaning up, or the pid
// was reused by an unrelated process.
bool socket_refuses(const std::string& path) {
  const int fd = connect_unix(path);
  if (fd >= 0) {
    ::close(fd);
    return false;
  }
  return errno == ECONNREFUSED || errno == ENOENT;
}

void remove_stale(const ProcessRecord& r, const std::string& dir) {
  if (is_socket(r.socket)) ::unlink(r.socket.c_str());
  if (!r.token_file.empty()) ::unlink(r.token_file.c_str());
  ::unlink((dir + "/" + std::to_string(r.pid) + ".token").c_str());
  if (!r.record_path.empty()) ::unlink(r.record_path.c_str());
}

std::optional<int> pid_from_name(const std::string& stem) {
  if (stem.empty() || stem.size() > 9) return std::nullopt;
  for (char c : stem)
    if (c < '0' || c > '9') return std::nullopt;
  return std::atoi(stem.c_str());
}

}  // namespace

std::vector<ProcessRecord> list_processes(bool clean_stale) {
  std::vector<ProcessRecord> out;
  const std::string dir = runtime_dir();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  std::vector<int> record_pids;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const auto& p = entry.path();
    if (p.extension() != ".json") continue;
    auto r = read_record(p.string());
    if (!r) continue;
    record_pids.push_back(r->pid);
    const bool stale = !pid_alive(r->pid) || (!r->socket.empty() && socket_refuses(r->socket));
    if (stale) {
      if (clean_stale) remove_stale(*r, dir);
      continue;
    }
    out.push_back(std::move(*r));
  }
  // Sockets without a record: a process that died between bind and writing it.
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const auto& p = entry.path();
    if (p.extension() != ".sock") continue;
    auto pid = pid_from_name(p.stem().string());
    if (!pid || std::find(record_pids.begin(), record_pids.end(), *pid) != record_pids.end()) continue;
    if (clean_stale && (!pid_alive(*pid) || socket_refuses(p.string()))) ::unlink(p.c_str());
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.pid < b.pid; });
  return out;
}

}  // namespace rl::control
