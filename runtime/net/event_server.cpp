#include "net/event_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "net/http_server.hpp"  // HttpServer::is_loopback: one definition of "loopback"

namespace rl::net {

struct ServerConn {
  EventServer* srv = nullptr;
  int fd = -1;
  std::string remote;
  std::string in;       // received bytes; [in_pos, end) not parsed yet
  size_t in_pos = 0;
  RequestParser parser;
  std::string out;      // bytes not yet taken by the socket: [out_pos, end)
  size_t out_pos = 0;
  std::shared_ptr<Responder> current;  // the request being answered (one at a time: pipelining)
  bool keep_alive = true;              // of the current request
  bool close_after_flush = false;
  bool closed = false;
  bool in_process = false;             // process() is on the stack (no recursion)
  bool want_out = false;               // EPOLLOUT armed
  bool reading = true;                 // EPOLLIN armed
  bool request_begun = false;
  double last_active = 0;
  double request_started = 0;
  size_t pending() const { return out.size() - out_pos; }
};

namespace {

// An emptied buffer keeps at most this much capacity: a kept-alive connection (a
// router's pool) would otherwise hold the memory of its largest request or answer
// for as long as it stays open (a 60 MB answer held ~380 MB of RSS).
constexpr size_t kKeepBufferBytes = size_t{1} << 20;

void release_if_large(std::string& buf) {
  if (buf.empty() && buf.capacity() > kKeepBufferBytes) std::string().swap(buf);
}

void set_events(EventLoop& loop, ServerConn* c) {
  uint32_t ev = 0;
  if (c->reading) ev |= EPOLLIN;
  if (c->want_out) ev |= EPOLLOUT;
  loop.modify(c->fd, ev);
}

void append_head(std::string& out, int minor, int status, const ResponseHeaders& headers, bool keep_alive,
                 std::optional<size_t> length, bool chunked) {
  out += minor == 0 ? "HTTP/1.0 " : "HTTP/1.1 ";
  out += std::to_string(status);
  out += ' ';
  out += status_reason(status);
  out += "\r\n";
  for (auto& [k, v] : headers) {
    // Framing and connection management are ours to decide.
    if (strcasecmp(k.c_str(), "content-length") == 0 || strcasecmp(k.c_str(), "transfer-encoding") == 0 ||
        strcasecmp(k.c_str(), "connection") == 0)
      continue;
    out += k;
    out += ": ";
    out += v;
    out += "\r\n";
  }
  if (length) {
    out += "Content-Length: ";
    out += std::to_string(*length);
    out += "\r\n";
  }
  if (chunked) out += "Transfer-Encoding: chunked\r\n";
  if (!keep_alive) {
    out += "Connection: close\r\n";
  } else if (minor == 0) {
    out += "Connection: keep-alive\r\n";
  }
  out += "\r\n";
}

}  // namespace

const char* status_reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Content Too Large";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return status < 400 ? "OK" : "Error";
  }
}

// ---- Responder ----------------------------------------------------------------

size_t Responder::buffered() const { return conn_ ? conn_->pending() : 0; }

void Responder::send(int status, const ResponseHeaders& headers, std::string_view body) {
  if (!conn_ || started_) return;
  ServerConn* c = conn_;
  started_ = finished_ = true;
  append_head(c->out, minor_, status, headers, c->keep_alive, body.size(), false);
  if (!head_request_) c->out.append(body);
  c->srv->flush(c);
  if (conn_) c->srv->response_done(c);
}

void Responder::start(int status, const ResponseHeaders& headers, std::optional<size_t> content_length) {
  if (!conn_ || started_) return;
  ServerConn* c = conn_;
  started_ = true;
  const int minor = minor_;
  chunked_ = !content_length && minor == 1 && !head_request_;
  if (!content_length && !chunked_) c->keep_alive = false;  // HTTP/1.0: the body ends at close
  append_head(c->out, minor, status, headers, c->keep_alive, content_length, chunked_);
  c->srv->flush(c);
}

void Responder::write(std::string_view bytes) {
  if (!conn_ || !started_ || finished_ || bytes.empty() || head_request_) return;
  ServerConn* c = conn_;
  if (chunked_) {
    char size[24];  // hex length + CRLF, written backwards (snprintf costs more than the chunk)
    char* p = size + sizeof size;
    *--p = '\n';
    *--p = '\r';
    size_t v = bytes.size();
    do {
      *--p = "0123456789abcdef"[v & 15];
      v >>= 4;
    } while (v);
    c->out.append(p, static_cast<size_t>(size + sizeof size - p));
    c->out.append(bytes);
    c->out.append("\r\n");
  } else {
    c->out.append(bytes);
  }
  c->srv->flush(c);
}

void Responder::end() {
  if (!conn_ || !started_ || finished_) return;
  ServerConn* c = conn_;
  finished_ = true;
  if (chunked_) c->out.append("0\r\n\r\n");
  c->srv->flush(c);
  if (conn_) c->srv->response_done(c);
}

void Responder::abort() {
  if (!conn_) return;
  finished_ = true;
  conn_->srv->close_conn(conn_);
}

// ---- server ---------------------------------------------------------------------

EventServer::EventServer(EventLoop& loop, Options opts, Handler handler)
    : loop_(loop), opts_(std::move(opts)), handler_(std::move(handler)) {}

EventServer::~EventServer() { stop(); }

std::string EventServer::url() const {
  const bool v6 = opts_.host.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + opts_.host + "]" : opts_.host) + ":" + std::to_string(port_);
}

void EventServer::start() {
  const std::string where = opts_.host + ":" + std::to_string(opts_.port);
  if (!opts_.allow_remote && !HttpServer::is_loopback(opts_.host))
    throw std::runtime_error(opts_.name + ": refusing to bind '" + opts_.host +
                             "': not a loopback address (hint: set allow_remote; nothing here authenticates requests)");
  std::string host = opts_.host == "localhost" ? "127.0.0.1" : opts_.host;
  sockaddr_storage ss{};
  socklen_t len = 0;
  int family = AF_INET;
  if (host.find(':') != std::string::npos) {
    family = AF_INET6;
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(static_cast<uint16_t>(opts_.port));
    if (inet_pton(AF_INET6, host.c_str(), &a->sin6_addr) != 1)
      throw std::runtime_error(opts_.name + ": bad host '" + opts_.host + "' (an IP address expected)");
    len = sizeof(sockaddr_in6);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(static_cast<uint16_t>(opts_.port));
    if (inet_pton(AF_INET, host.c_str(), &a->sin_addr) != 1)
      throw std::runtime_error(opts_.name + ": bad host '" + opts_.host + "' (an IP address expected)");
    len = sizeof(sockaddr_in);
  }
  const int fd = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(opts_.name + ": socket(): " + std::strerror(errno));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // not REUSEPORT: a busy port must fail
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(fd, opts_.backlog) != 0) {
    const int e = errno;
    ::close(fd);
    throw std::runtime_error(opts_.name + ": cannot listen on " + where + " (" + std::strerror(e) +
                             ") (hint: pick another port, or 0 for a free one)");
  }
  sockaddr_storage bound{};
  socklen_t blen = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &blen);
  port_ = ntohs(family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                   : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  listen_fd_ = fd;
  loop_.watch(fd, EPOLLIN, [this](uint32_t) { on_accept(); });
  sweep_timer_ = loop_.call_later(1.0, [this] { sweep(); });
}

void EventServer::stop_accepting() {
  if (listen_fd_ < 0) return;
  loop_.unwatch(listen_fd_);
  ::close(listen_fd_);
  listen_fd_ = -1;
}

void EventServer::stop() {
  stop_accepting();
  if (sweep_timer_) loop_.cancel_timer(sweep_timer_);
  sweep_timer_ = 0;
  std::vector<ServerConn*> all;
  for (auto& [fd, c] : conns_) all.push_back(c.get());
  for (ServerConn* c : all) close_conn(c);
  graveyard_.clear();
}

EventServer::Stats EventServer::stats() const {
  Stats s = stats_;
  s.open = conns_.size();
  return s;
}

void EventServer::on_accept() {
  graveyard_.clear();
  while (true) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN, or a transient error (EMFILE...): retried on the next readiness
    if (conns_.size() >= opts_.max_connections) {
      stats_.rejected++;
      ::close(fd);
      continue;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // small responses must not wait for Nagle
    auto c = std::make_unique<ServerConn>();
    c->srv = this;
    c->fd = fd;
    c->parser = RequestParser(opts_.limits);
    c->last_active = EventLoop::now();
    char buf[INET6_ADDRSTRLEN] = {0};
    if (ss.ss_family == AF_INET)
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, buf, sizeof buf);
    else if (ss.ss_family == AF_INET6)
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr, buf, sizeof buf);
    c->remote = buf;
    stats_.accepted++;
    conns_.emplace(fd, std::move(c));
    loop_.watch(fd, EPOLLIN, [this, fd](uint32_t ev) { on_io(fd, ev); });
  }
}

void EventServer::on_io(int fd, uint32_t events) {
  graveyard_.clear();
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  ServerConn* c = it->second.get();
  if (events & EPOLLOUT) {
    flush(c);
    if (c->closed) return;
  }
  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
    char buf[65536];
    while (c->reading) {
      // A large body with nothing buffered ahead of it goes straight into the request,
      // up to 1 MiB a read: no copy through c->in (which would grow and be released
      // again for every large body: fresh pages each time).
      if (const size_t left = c->parser.body_remaining(); left >= sizeof buf && c->in_pos == c->in.size()) {
        const size_t want = std::min<size_t>(left, size_t{1} << 20);
        int err = 0;
        const ssize_t n = c->parser.read_body(want, [fd, &err](char* dst, size_t len) {
          const ssize_t r = ::recv(fd, dst, len, 0);
          err = errno;
          return r;
        });
        if (n > 0) {
          c->last_active = EventLoop::now();
          if (static_cast<size_t>(n) < want) break;
          continue;
        }
        if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK)) break;
        if (n < 0 && err == EINTR) continue;
        close_conn(c);
        return;
      }
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0) {
        c->in.append(buf, static_cast<size_t>(n));
        c->last_active = EventLoop::now();
        if (static_cast<size_t>(n) < sizeof buf) break;
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n < 0 && errno == EINTR) continue;
      // Peer closed (or reset): nothing more will come, and an unfinished
      // response has no one to go to.
      close_conn(c);
      return;
    }
  }
  process(c);
}

void EventServer::process(ServerConn* c) {
  if (c->in_process) return;
  c->in_process = true;
  while (!c->closed && !c->current && !c->close_after_flush) {
    if (!c->request_begun && c->in_pos < c->in.size()) {
      c->request_begun = true;
      c->request_started = EventLoop::now();
    }
    const auto status = c->parser.feed(c->in, c->in_pos);
    if (c->in_pos > 0 && c->in_pos * 2 >= c->in.size()) {  // compact: drop parsed bytes
      c->in.erase(0, c->in_pos);
      c->in_pos = 0;
      release_if_large(c->in);
    }
    if (c->parser.take_expect_continue() && status == RequestParser::Status::need_more) {
      c->out += "HTTP/1.1 100 Continue\r\n\r\n";  // the client holds the body until it sees this
      flush(c);
      if (c->closed) break;
    }
    if (status == RequestParser::Status::need_more) break;
    if (status == RequestParser::Status::error) {
      stats_.bad_requests++;
      reject(c, c->parser.error_status(), c->parser.error_message());
      break;
    }
    // Moved out: the parser is reset (for the next pipelined request) as soon as
    // the response ends, possibly while the handler still looks at req.
    ServerRequest req = std::move(c->parser.request());
    req.remote_addr = c->remote;
    c->keep_alive = req.keep_alive;
    auto res = std::make_shared<Responder>();
    res->conn_ = c;
    res->head_request_ = req.method == "HEAD";
    res->minor_ = req.version_minor;
    c->current = res;
    stats_.requests++;
    try {
      handler_(req, res);
    } catch (const std::exception& e) {
      if (res->alive() && !res->started())
        res->send_json(500, R"({"error":{"message":"internal error","type":"internal_error"}})");
      else
        res->abort();
    }
  }
  // Unparsed input piles up while a response is pending: stop reading past the limit.
  if (!c->closed) {
    const bool want_read = c->in.size() - c->in_pos < opts_.read_buffer_limit;
    if (want_read != c->reading) {
      c->reading = want_read;
      set_events(loop_, c);
    }
  }
  c->in_process = false;
}

void EventServer::response_done(ServerConn* c) {
  c->current.reset();
  c->request_begun = false;
  if (!c->keep_alive) c->close_after_flush = true;
  c->parser.reset();
  if (c->close_after_flush) {
    if (c->pending() == 0) close_conn(c);
    return;
  }
  process(c);  // a pipelined request may be waiting (no-op when called from inside process)
}

void EventServer::reject(ServerConn* c, int status, const std::string& message) {
  std::string body = R"({"error":{"message":")";
  for (char ch : message) {
    if (ch == '"' || ch == '\\') body += '\\';
    if (static_cast<unsigned char>(ch) >= 0x20) body += ch;
  }
  body += R"(","type":"bad_request"}})";
  append_head(c->out, 1, status, {{"Content-Type", "application/json"}}, false, body.size(), false);
  c->out += body;
  c->close_after_flush = true;
  c->reading = false;  // the rest of the input cannot be framed: ignore it
  set_events(loop_, c);
  flush(c);
}

void EventServer::flush(ServerConn* c) {
  if (c->closed) return;
  while (c->pending() > 0) {
    const ssize_t n = ::send(c->fd, c->out.data() + c->out_pos, c->pending(), MSG_NOSIGNAL);
    if (n > 0) {
      c->out_pos += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    close_conn(c);  // EPIPE, ECONNRESET: the client is gone
    return;
  }
  const bool was_blocked = c->want_out;
  if (c->pending() == 0) {
    c->out.clear();
    c->out_pos = 0;
    release_if_large(c->out);
    if (c->close_after_flush && !c->current) {
      close_conn(c);
      return;
    }
  } else if (c->out_pos > (1 << 20) && c->out_pos * 2 > c->out.size()) {
    c->out.erase(0, c->out_pos);
    c->out_pos = 0;
  }
  const bool want = c->pending() > 0;
  if (want != c->want_out) {
    c->want_out = want;
    set_events(loop_, c);
  }
  if (was_blocked && c->current && c->pending() < opts_.write_low_watermark && c->current->on_drain_) {
    auto fn = c->current->on_drain_;  // copy: it may replace itself
    fn();
  }
}

void EventServer::close_conn(ServerConn* c) {
  if (c->closed) return;
  c->closed = true;
  loop_.unwatch(c->fd);
  ::close(c->fd);
  auto res = std::move(c->current);
  auto it = conns_.find(c->fd);
  if (it != conns_.end()) {
    graveyard_.push_back(std::move(it->second));  // the caller may still hold c
    conns_.erase(it);
  }
  if (res) {
    res->conn_ = nullptr;
    if (!res->finished_ && res->on_close_) {
      auto fn = std::move(res->on_close_);
      fn();
    }
  }
}

void EventServer::sweep() {
  sweep_timer_ = loop_.call_later(1.0, [this] { sweep(); });
  graveyard_.clear();
  const double now = EventLoop::now();
  std::vector<ServerConn*> expired, slow;
  for (auto& [fd, c] : conns_) {
    if (c->current) continue;  // the handler owns the timing of a pending response
    if (c->request_begun && now - c->request_started > opts_.header_timeout_s)
      slow.push_back(c.get());
    else if (!c->request_begun && now - c->last_active > opts_.idle_timeout_s)
      expired.push_back(c.get());
  }
  for (ServerConn* c : expired) {
    stats_.timeouts++;
    close_conn(c);
  }
  for (ServerConn* c : slow) {
    stats_.timeouts++;
    if (c->close_after_flush) {
      close_conn(c);  // its error answer is still stuck in a full socket buffer
    } else {
      reject(c, 408, "request not complete after " + std::to_string(static_cast<int>(opts_.header_timeout_s)) + " s");
    }
  }
}

}  // namespace rl::net
