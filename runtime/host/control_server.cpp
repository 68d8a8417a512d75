#include "host/control_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "base/admin_token.hpp"  // random_hex, same_secret
#include "base/errors.hpp"
#include "base/json_input.hpp"
#include "host/control_registry.hpp"

#ifndef RLHOST_VERSION
#define RLHOST_VERSION "0.0.0"
#endif

namespace fs = std::filesystem;
using nlohmann::json;
using ojson = nlohmann::ordered_json;  // replies keep their fields in protocol order

namespace rl {

namespace {

constexpr size_t kMaxUnsentOutput = size_t{64} << 20;  // a client that never reads is dropped

// Best effort, on a fresh socket we are about to close anyway.
void refuse(int fd, const std::string& error) {
  const std::string line = ojson{{"id", nullptr}, {"ok", false}, {"error", error}}.dump() + "\n";
  (void)!::send(fd, line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::close(fd);
}

}  // namespace

ControlServer::ControlServer(EventLoop& loop, Options opts)
    : loop_(loop), opts_(std::move(opts)), self_(std::make_shared<ControlServer*>(this)) {}

ControlServer::~ControlServer() {
  stop();
  *self_ = nullptr;
}

void ControlServer::set_handlers(RequestFn on_request, DisconnectFn on_disconnect) {
  on_request_ = std::move(on_request);
  on_disconnect_ = std::move(on_disconnect);
}

void ControlServer::start() {
  if (started_) return;
  started_ = true;
  started_at_ = control::iso_time_now();
  std::error_code ec;
  cwd_ = fs::current_path(ec).string();
  try {
    if (opts_.unix_socket) listen_unix();
    if (opts_.tcp_port) {
      listen_tcp();
      setup_token();
    }
  } catch (...) {
    stop();
    throw;
  }
  if (opts_.write_record) write_record();
}

void ControlServer::listen_unix() {
  std::string path = opts_.socket_path;
  if (path.empty()) path = control::ensure_runtime_dir() + "/" + std::to_string(::getpid()) + ".sock";
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path)
    throw Error("control socket path is too long (" + std::to_string(path.size()) + " bytes, at most " +
                    std::to_string(sizeof addr.sun_path - 1) + "): " + path,
                "pass a shorter --control PATH");
  const fs::path parent = fs::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty() && !fs::exists(parent, ec)) {
    if (!fs::create_directories(parent, ec)) throw Error("cannot create directory " + parent.string() + ": " + ec.message());
    ::chmod(parent.c_str(), 0700);
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      throw Error("control socket path " + path + " exists and is not a socket", "remove it or pick another --control PATH");
    const int probe = control::connect_unix(path);
    if (probe >= 0) {
      ::close(probe);
      throw Error("control socket " + path + " is in use by another process", "pick another --control PATH");
    }
    ::unlink(path.c_str());  // left behind by a process that died
  }
  unix_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (unix_fd_ < 0) throw_errno("control socket");
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  // The socket file gets its mode at bind(): a umask makes it 0600 from the
  // first instant (chmod afterwards would leave a window).
  const mode_t old = ::umask(0177);
  const int rc = ::bind(unix_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  const int bind_errno = errno;
  ::umask(old);
  if (rc != 0) {
    errno = bind_errno;
    throw_errno("cannot bind control socket " + path);
  }
  socket_path_ = path;
  ::chmod(path.c_str(), 0600);
  if (::stat(path.c_str(), &st) == 0) socket_ino_ = st.st_ino;
  if (::listen(unix_fd_, 64) != 0) throw_errno("cannot listen on control socket " + path);
  loop_.watch(unix_fd_, EPOLLIN, [this](uint32_t) { accept_clients(unix_fd_, false); });
}

void ControlServer::listen_tcp() {
  tcp_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (tcp_fd_ < 0) throw_errno("control TCP socket");
  int one = 1;
  ::setsockopt(tcp_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(*opts_.tcp_port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);  // never another interface: see docs/attach.md
  if (::bind(tcp_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    throw_errno("cannot bind control TCP port 127.0.0.1:" + std::to_string(*opts_.tcp_port));
  socklen_t len = sizeof addr;
  ::getsockname(tcp_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  tcp_port_ = ntohs(addr.sin_port);
  if (::listen(tcp_fd_, 64) != 0) throw_errno("cannot listen on control TCP port");
  loop_.watch(tcp_fd_, EPOLLIN, [this](uint32_t) { accept_clients(tcp_fd_, true); });
}

void ControlServer::setup_token() {
  bool generated = false;
  token_ = opts_.token;
  if (token_.empty())
    if (const char* env = std::getenv("RLHOST_CONTROL_TOKEN"); env && *env) token_ = env;
  if (token_.empty()) {
    token_ = random_hex(16);
    generated = true;
  }
  const std::string dir = socket_path_.empty() ? control::ensure_runtime_dir()
                                               : fs::path(socket_path_).parent_path().string();
  token_path_ = (dir.empty() ? std::string(".") : dir) + "/" + std::to_string(::getpid()) + ".token";
  try {
    control::write_private_file(token_path_, token_ + "\n");
  } catch (const std::exception& e) {
    spdlog::warn("control: cannot save the token: {}", e.what());
    token_path_.clear();
  }
  if (generated && opts_.announce_token)
    std::fprintf(stderr, "rlhost: control on tcp://127.0.0.1:%d, token %s%s%s\n", tcp_port_, token_.c_str(),
                 token_path_.empty() ? "" : " (saved in ", token_path_.empty() ? "" : (token_path_ + ")").c_str());
}

void ControlServer::write_record() {
  try {
    control::ProcessRecord r;
    r.pid = ::getpid();
    r.script = opts_.script;
    r.argv = opts_.argv;
    r.started_at = started_at_;
    r.cwd = cwd_;
    r.socket = socket_path_;
    r.tcp_port = tcp_port_;
    r.token_file = token_path_;
    r.version = RLHOST_VERSION;
    const std::string path = control::ensure_runtime_dir() + "/" + std::to_string(r.pid) + ".json";
    control::write_private_file(path, control::record_to_json(r).dump(2) + "\n");
    record_path_ = path;
  } catch (const std::exception& e) {
    spdlog::warn("control: `rlhost attach --list` will not show this process: {}", e.what());
  }
}

void ControlServer::stop() {
  std::vector<uint64_t> ids;
  for (auto& [id, c] : clients_) ids.push_back(id);
  for (auto id : ids) close_client(id, false);  // shutting down: nobody to tell
  pending_.clear();
  if (unix_fd_ >= 0) {
    loop_.unwatch(unix_fd_);
    ::close(unix_fd_);
    unix_fd_ = -1;
    // Only our own socket: another process may have replaced it meanwhile.
    struct stat st {};
    if (!socket_path_.empty() && ::lstat(socket_path_.c_str(), &st) == 0 && st.st_ino == socket_ino_)
      ::unlink(socket_path_.c_str());
  }
  if (tcp_fd_ >= 0) {
    loop_.unwatch(tcp_fd_);
    ::close(tcp_fd_);
    tcp_fd_ = -1;
  }
  if (!token_path_.empty()) ::unlink(token_path_.c_str());
  if (!record_path_.empty()) ::unlink(record_path_.c_str());
  token_path_.clear();
  record_path_.clear();
}

ojson ControlServer::info() const {
  return ojson{{"pid", ::getpid()},  {"script", opts_.script},     {"argv", opts_.argv},
              {"started_at", started_at_}, {"cwd", cwd_},       {"version", RLHOST_VERSION},
              {"socket", socket_path_},    {"tcp_port", tcp_port_}, {"clients", clients_.size()}};
}

// ---- connections ----------------------------------------------------------------

void ControlServer::accept_clients(int listen_fd, bool tcp) {
  for (;;) {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) spdlog::warn("control: accept: {}", std::strerror(errno));
      return;
    }
    if (!tcp) {
      ucred cred{};
      socklen_t len = sizeof cred;
      if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != ::getuid()) {
        spdlog::warn("control: refused a connection from uid {} (only uid {} may attach)", cred.uid, ::getuid());
        refuse(fd, "permission denied: this process belongs to another user");
        continue;
      }
    }
    if (clients_.size() >= opts_.max_clients) {
      refuse(fd, "too many attached clients (" + std::to_string(opts_.max_clients) + ")");
      continue;
    }
    auto c = std::make_unique<Client>();
    c->id = next_client_++;
    c->fd = fd;
    c->tcp = tcp;
    c->authed = !tcp;  // the Unix socket is authenticated by its mode and SO_PEERCRED
    const uint64_t id = c->id;
    clients_.emplace(id, std::move(c));
    loop_.watch(fd, EPOLLIN, [this, id](uint32_t ev) { on_client_event(id, ev); });
  }
}

void ControlServer::on_client_event(uint64_t id, uint32_t events) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return;
  Client& c = *it->second;
  if (events & EPOLLERR) return close_client(id, true);
  if (events & EPOLLOUT) {
    flush(c);
    if (!clients_.count(id)) return;
  }
  if (c.closing) {
    if (events & EPOLLHUP) close_client(id, true);  // cannot deliver the rest anyway
    return;
  }
  if (events & (EPOLLIN | EPOLLHUP)) {
    if (!read_client(c)) close_client(id, true);
  }
}

bool ControlServer::read_client(Client& c) {
  const uint64_t id = c.id;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n == 0) return false;  // the client went away (possibly mid-chunk: the embedder is told)
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
    c.in.append(buf, static_cast<size_t>(n));
    size_t start = 0;
    for (;;) {
      const size_t nl = c.in.find('\n', std::max(start, c.scanned));
      if (nl == std::string::npos) break;
      if (nl - start > opts_.max_message) {
        c.in.clear();
        send_error(c, nullptr, "message too large (over " + std::to_string(opts_.max_message >> 20) + " MiB)");
        begin_close(c);
        return true;
      }
      std::string line = c.in.substr(start, nl - start);
      start = nl + 1;
      handle_line(c, line);
      // The handler may have run Lua that closed or dropped this client.
      auto it = clients_.find(id);
      if (it == clients_.end() || it->second.get() != &c) return true;
      if (c.closing) return true;
    }
    c.in.erase(0, start);
    c.scanned = c.in.size();
    if (c.in.size() > opts_.max_message) {
      // No newline within the limit: refuse without buffering more.
      c.in.clear();
      c.scanned = 0;
      send_error(c, nullptr, "message too large (over " + std::to_string(opts_.max_message >> 20) + " MiB)");
      begin_close(c);
      return true;
    }
  }
}

void ControlServer::handle_line(Client& c, std::string_view line) {
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
  if (line.find_first_not_of(" \t") == std::string_view::npos) return;
  json msg;
  try {
    msg = json_input::parse(line, "control request");  // the same limits as the HTTP servers
  } catch (const json_input::Error& e) {
    return send_error(c, nullptr, std::string("malformed request: ") + e.what() +
                                      "; expected one JSON object per line (see docs/attach.md)");
  }
  if (!msg.is_object())
    return send_error(c, nullptr, "malformed request: expected one JSON object per line (see docs/attach.md)");
  const auto id_it = msg.find("id");
  if (id_it != msg.end() && !id_it->is_null() && !id_it->is_number() && !id_it->is_string())
    return send_error(c, nullptr, "\"id\" must be a number or a string, got " + json_input::brief(*id_it));
  json id = id_it != msg.end() ? *id_it : json(nullptr);
  const bool has_token = msg.contains("token") && msg["token"].is_string();
  if (c.tcp && (!c.authed || has_token)) {
    if (!has_token || !same_secret(msg["token"].get<std::string>(), token_)) {
      send_error(c, id, has_token ? "bad token" : "token required: this TCP control port needs \"token\"");
      return begin_close(c);
    }
    c.authed = true;
  }
  if (!msg.contains("op") || !msg["op"].is_string())
    return send_error(c, id, "missing \"op\" (eval, complete?, interrupt or info)");
  const std::string op = msg["op"].get<std::string>();
  if (op == "info") {
    ojson r{{"id", id}, {"ok", true}, {"values", ojson::array()}, {"output", ""}, {"error", ""},
            {"incomplete", false}, {"info", info()}};
    return send(c, r);
  }
  if (op != "eval" && op != "complete?" && op != "interrupt")
    return send_error(c, id, "unknown op '" + json_input::excerpt(op) + "' (expected eval, complete?, interrupt or info)");
  std::string code;
  if (op != "interrupt") {
    if (!msg.contains("code") || !msg["code"].is_string()) return send_error(c, id, "\"" + op + "\" needs \"code\": a string");
    code = msg["code"].get<std::string>();
  }
  if (!on_request_) return send_error(c, id, "this process does not evaluate code (no handler)");
  const uint64_t rid = next_request_++;
  pending_.emplace(rid, Pending{c.id, id});
  on_request_(ControlRequest{c.id, rid, op, std::move(code)});
}

void ControlServer::respond(uint64_t request, const ControlReply& reply) {
  auto p = pending_.find(request);
  if (p == pending_.end()) return;
  const Pending pending = std::move(p->second);
  pending_.erase(p);
  auto it = clients_.find(pending.client);
  if (it == clients_.end() || it->second->closing) return;
  ojson r{{"id", pending.id},       {"ok", reply.ok},       {"values", reply.values},
          {"output", reply.output}, {"error", reply.error}, {"incomplete", reply.incomplete}};
  send(*it->second, r);
}

void ControlServer::send_error(Client& c, const json& id, const std::string& error) {
  send(c, ojson{{"id", id}, {"ok", false}, {"values", ojson::array()}, {"output", ""}, {"error", error},
                {"incomplete", false}});
}

void ControlServer::send(Client& c, const ojson& msg) {
  // Lua strings need not be UTF-8: replace bad bytes rather than fail the reply.
  c.out += msg.dump(-1, ' ', false, ojson::error_handler_t::replace);
  c.out += '\n';
  flush(c);
}

void ControlServer::flush(Client& c) {
  while (c.out_off < c.out.size()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.out_off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (c.out.size() - c.out_off > kMaxUnsentOutput) {
        spdlog::warn("control: dropping a client that does not read its replies");
        close_later(c.id);
        return;
      }
      if (!c.want_write) {
        loop_.modify(c.fd, c.closing ? EPOLLOUT : (EPOLLIN | EPOLLOUT));
        c.want_write = true;
      }
      return;
    }
    close_later(c.id);  // EPIPE, ECONNRESET: the client is gone
    return;
  }
  c.out.clear();
  c.out_off = 0;
  if (c.want_write) {
    loop_.modify(c.fd, EPOLLIN);
    c.want_write = false;
  }
  if (c.closing) close_later(c.id);
}

// Stops reading (unread input would wake the loop forever) and closes once
// what is queued, typically an error message, has been written.
void ControlServer::begin_close(Client& c) {
  if (c.closing) return;
  c.closing = true;
  c.in.clear();
  if (c.out_off >= c.out.size()) return close_later(c.id);
  loop_.modify(c.fd, EPOLLOUT);
  c.want_write = true;
}

// Deferred: respond() and flush() may run inside the embedder's own code
// (inside Lua), where telling it about a disconnect would re-enter it.
void ControlServer::close_later(uint64_t id) {
  std::weak_ptr<ControlServer*> weak = self_;
  loop_.post([weak, id] {
    if (auto p = weak.lock(); p && *p) (*p)->close_client(id, true);
  });
}

void ControlServer::close_client(uint64_t id, bool notify) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return;
  const int fd = it->second->fd;
  loop_.unwatch(fd);
  ::close(fd);
  clients_.erase(it);
  for (auto p = pending_.begin(); p != pending_.end();) {
    if (p->second.client == id)
      p = pending_.erase(p);
    else
      ++p;
  }
  if (notify && on_disconnect_) on_disconnect_(id);
}

}  // namespace rl
