#include "net/upstream.hpp"

#include "net/upstream_impl.hpp"  // Host, Conn, Txn (shared with upstream_parse.cpp)

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace rl::net {

namespace {

bool skip_request_header(std::string_view name) {  // we write these ourselves
  auto is = [&](std::string_view w) { return name.size() == w.size() && strncasecmp(name.data(), w.data(), w.size()) == 0; };
  return is("host") || is("content-length") || is("connection") || is("transfer-encoding") || is("expect");
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

}  // namespace

UpstreamPool::UpstreamPool(EventLoop& loop, Options opts) : loop_(loop), opts_(opts) {}

UpstreamPool::~UpstreamPool() {
  for (auto& [id, t] : txns_)
    if (t->deadline_timer) loop_.cancel_timer(t->deadline_timer);
  for (auto& [fd, c] : conns_) {
    if (c->connect_timer) loop_.cancel_timer(c->connect_timer);
    if (!c->closed) {
      loop_.unwatch(c->fd);
      ::close(c->fd);
    }
  }
}

UpstreamPool::Stats UpstreamPool::stats() const {
  Stats s = stats_;
  for (auto& [k, h] : hosts_) {
    s.idle += h->idle.size();
    s.active += static_cast<size_t>(h->active);
    s.queued += h->queue.size();
  }
  return s;
}

const HttpResponse* UpstreamPool::peek(uint64_t id) const {
  auto it = txns_.find(id);
  return it == txns_.end() ? nullptr : &it->second->resp;
}

UpstreamPool::Host* UpstreamPool::host_for(const std::string& url, std::string& path, std::string& error) {
  if (url.rfind("http://", 0) != 0) {
    error = "bad URL (only http:// is supported here)";
    return nullptr;
  }
  const size_t slash = url.find('/', 7);
  const std::string authority = url.substr(7, slash == std::string::npos ? std::string::npos : slash - 7);
  path = slash == std::string::npos ? "/" : url.substr(slash);
  auto it = hosts_.find(authority);
  if (it != hosts_.end()) return it->second.get();
  std::string host = authority, port = "80";
  if (!authority.empty() && authority[0] == '[') {
    const size_t close = authority.find(']');
    host = authority.substr(1, close == std::string::npos ? std::string::npos : close - 1);
    if (close != std::string::npos && close + 1 < authority.size() && authority[close + 1] == ':') port = authority.substr(close + 2);
  } else if (const size_t colon = authority.rfind(':'); colon != std::string::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  // Resolved once per host and cached: workers are addressed by IP or a local
  // name, and a blocking lookup on every request would stall the loop.
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || !res) {
    error = "Couldn't resolve host '" + host + "' (" + gai_strerror(rc) + ")";
    return nullptr;
  }
  auto h = std::make_unique<Host>();
  h->authority = authority;
  std::memcpy(&h->addr, res->ai_addr, res->ai_addrlen);
  h->addr_len = res->ai_addrlen;
  freeaddrinfo(res);
  Host* raw = h.get();
  hosts_.emplace(authority, std::move(h));
  return raw;
}

uint64_t UpstreamPool::submit(HttpRequest req, HttpClient::DoneFn done, HttpClient::ChunkFn on_chunk) {
  auto owned = std::make_unique<Txn>();
  Txn* t = owned.get();
  t->id = next_id_++;
  t->req = std::move(req);
  t->done = std::move(done);
  t->on_chunk = std::move(on_chunk);
  t->submitted = EventLoop::now();
  txns_.emplace(t->id, std::move(owned));
  stats_.submitted++;
  ++in_api_;
  std::string path, error;
  t->host = host_for(t->req.url, path, error);
  if (!t->host) {
    fail(t, error);
    --in_api_;
    return t->id;
  }
  const double timeout = t->req.timeout_s > 0 ? t->req.timeout_s : opts_.timeout_s;
  const uint64_t id = t->id;
  t->deadline_timer = loop_.call_later(timeout, [this, id] { on_deadline(id); });
  std::string& w = t->wire;
  w.reserve(128 + path.size() + t->req.body.size() + t->req.headers.size() * 48);
  w += t->req.method;
  w += ' ';
  w += path;
  w += " HTTP/1.1\r\nHost: ";
  w += t->host->authority;
  w += "\r\n";
  for (auto& [k, v] : t->req.headers) {
    if (skip_request_header(k)) continue;
    w += k;
    w += ": ";
    w += v;
    w += "\r\n";
  }
  if (!t->req.body.empty() || t->req.method == "POST" || t->req.method == "PUT" || t->req.method == "PATCH") {
    w += "Content-Length: ";
    w += std::to_string(t->req.body.size());
    w += "\r\n";
  }
  w += "\r\n";
  w += t->req.body;
  Host* h = t->host;
  if (h->queue.empty() && h->active < opts_.max_per_host) {
    start(t);
  } else {
    t->queued = true;
    h->queue.push_back(t);
  }
  --in_api_;
  return id;
}

void UpstreamPool::pump(Host* h) {
  while (!h->queue.empty() && h->active < opts_.max_per_host) {
    Txn* t = h->queue.front();
    h->queue.pop_front();
    t->queued = false;
    start(t);
  }
}

void UpstreamPool::start(Txn* t) {
  Host* h = t->host;
  h->active++;
  t->active = true;
  while (!h->idle.empty()) {
    Conn* c = h->idle.back();
    h->idle.pop_back();
    if (c->closed) continue;
    stats_.reused++;
    c->txn = t;
    t->conn = c;
    send_request(c);
    return;
  }
  connect_new(t);
}

void UpstreamPool::set_events(Conn* c, uint32_t ev) {
  if (c->events == ev) return;
  c->events = ev;
  loop_.modify(c->fd, ev);
}

void UpstreamPool::connect_new(Txn* t) {
  Host* h = t->host;
  const int fd = ::socket(h->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail(t, std::string("Couldn't connect to server (socket: ") + std::strerror(errno) + ")");
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  auto owned = std::make_unique<Conn>();
  Conn* c = owned.get();
  c->fd = fd;
  c->host = h;
  c->txn = t;
  t->conn = c;
  conns_.emplace(fd, std::move(owned));
  stats_.connections_opened++;
  c->events = EPOLLOUT;
  loop_.watch(fd, EPOLLOUT, [this, fd](uint32_t ev) {
    auto it = conns_.find(fd);
    if (it != conns_.end()) on_io(it->second.get(), ev);
  });
  const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&h->addr), h->addr_len);
  if (rc != 0 && errno != EINPROGRESS) {
    const std::string why = std::strerror(errno);
    return fail(t, "Couldn't connect to server (connect to " + h->authority + ": " + why + ")");
  }
  if (rc == 0) {
    send_request(c);
    return;
  }
  c->connecting = true;
  const double ct = t->req.connect_timeout_s > 0 ? t->req.connect_timeout_s : opts_.connect_timeout_s;
  c->connect_timer = loop_.call_later(ct, [this, fd, ct] {
    auto it = conns_.find(fd);
    if (it == conns_.end()) return;
    Conn* cc = it->second.get();
    cc->connect_timer = 0;
    if (cc->connecting && cc->txn)
      fail(cc->txn, "Couldn't connect to server (connect to " + cc->host->authority + " timed out after " + seconds(ct) + " s)");
  });
}

void UpstreamPool::send_request(Conn* c) {
  Txn* t = c->txn;
  c->in.clear();
  c->in_pos = 0;
  c->head_scanned = 0;
  c->st = Parse::head;
  c->got_any = false;
  c->keep_alive = true;
  c->paused = false;
  c->out_pos = 0;
  while (c->out_pos < t->wire.size()) {
    const ssize_t n = ::send(c->fd, t->wire.data() + c->out_pos, t->wire.size() - c->out_pos, MSG_NOSIGNAL);
    if (n > 0) {
      c->out_pos += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      set_events(c, EPOLLIN | EPOLLOUT);
      return;
    }
    // A reused connection the server closed meanwhile: try once on a fresh one.
    if (c->used && !t->stale_retried) {
      t->stale_retried = true;
      stats_.stale_retries++;
      c->txn = nullptr;
      t->conn = nullptr;
      close_conn(c);
      return connect_new(t);
    }
    return fail(t, std::string("send failed (") + std::strerror(errno) + ")");
  }
  set_events(c, EPOLLIN);
}

void UpstreamPool::on_io(Conn* c, uint32_t events) {
  graveyard_.clear();  // nothing of ours is on the stack here
  if (c->connecting) {
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err == 0) {
      // The loop may hand us a stale event meant for an earlier socket with
      // this fd number: only a connected socket has a peer.
      sockaddr_storage peer{};
      socklen_t plen = sizeof peer;
      if (getpeername(c->fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0) return;
      c->connecting = false;
      if (c->connect_timer) loop_.cancel_timer(c->connect_timer);
      c->connect_timer = 0;
      if (c->txn) send_request(c);
      return;
    }
    if (c->txn) return fail(c->txn, "Couldn't connect to server (connect to " + c->host->authority + ": " + std::strerror(err) + ")");
    return close_conn(c);
  }
  if ((events & EPOLLOUT) && c->txn && c->out_pos < c->txn->wire.size()) {
    Txn* t = c->txn;
    while (c->out_pos < t->wire.size()) {
      const ssize_t n = ::send(c->fd, t->wire.data() + c->out_pos, t->wire.size() - c->out_pos, MSG_NOSIGNAL);
      if (n > 0) {
        c->out_pos += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
      return fail(t, std::string("send failed (") + std::strerror(errno) + ")");
    }
    if (c->out_pos == t->wire.size()) set_events(c, EPOLLIN);
  }
  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(c);
}

void UpstreamPool::on_readable(Conn* c) {
  bool eof = false;
  int rerr = 0;
  char buf[65536];
  while (true) {
    const ssize_t n = ::recv(c->fd, buf, sizeof buf, 0);
    if (n > 0) {
      c->in.append(buf, static_cast<size_t>(n));
      if (static_cast<size_t>(n) < sizeof buf) break;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    eof = true;
    rerr = n < 0 ? errno : 0;
    break;
  }
  if (!c->txn) return close_conn(c);  // idle: the server closed it (or sent junk)
  if (c->in.size() > c->in_pos) c->got_any = true;
  if (!parse(c)) return;  // finished, failed or cancelled inside
  if (!eof) return;
  Txn* t = c->txn;
  if (!t) return;
  if (c->st == Parse::body_close) return complete(t, false);
  if (!c->got_any && c->used && !t->stale_retried) {  // closed while idle, before our request
    t->stale_retried = true;
    stats_.stale_retries++;
    c->txn = nullptr;
    t->conn = nullptr;
    close_conn(c);
    return connect_new(t);
  }
  const std::string why = rerr ? std::strerror(rerr) : "connection closed";
  fail(t, c->got_any ? "the worker closed the connection before the response ended (" + why + ")"
                     : "Empty reply from server (" + why + ")");
}

void UpstreamPool::complete(Txn* t, bool reusable) {
  Conn* c = t->conn;
  Host* h = t->host;
  t->conn = nullptr;
  if (c) {
    c->txn = nullptr;
    if (reusable) release_to_idle(c);
    else close_conn(c);
  }
  if (t->active) h->active--;
  t->active = false;
  HttpResult r;
  r.ok = true;
  r.response = std::move(t->resp);
  r.response.timings.total_s = EventLoop::now() - t->submitted;
  finish(t, std::move(r));
  pump(h);
}

void UpstreamPool::fail(Txn* t, std::string what, bool timed_out) {
  Host* h = t->host;
  bool sent = false;
  if (Conn* c = t->conn) {
    sent = !c->connecting && c->out_pos > 0;
    t->conn = nullptr;
    c->txn = nullptr;
    close_conn(c);
  }
  if (t->queued && h) h->queue.erase(std::find(h->queue.begin(), h->queue.end(), t));
  t->queued = false;
  if (t->active && h) h->active--;
  t->active = false;
  HttpResult r;
  r.timed_out = timed_out;
  r.sent = sent;
  r.error = t->prefix() + what;
  r.response = std::move(t->resp);
  finish(t, std::move(r));
  if (h) pump(h);
}

void UpstreamPool::finish(Txn* t, HttpResult&& r) {
  if (t->deadline_timer) loop_.cancel_timer(t->deadline_timer);
  t->deadline_timer = 0;
  const uint64_t id = t->id;
  if (in_api_ > 0) {
    // Inside submit()/cancel(): deliver from the loop instead, as promised.
    t->finished = true;
    t->result = std::move(r);
    std::weak_ptr<int> alive = alive_;
    loop_.call_later(0, [this, id, alive] {
      if (alive.expired()) return;
      auto it = txns_.find(id);
      if (it == txns_.end()) return;
      auto owned = std::move(it->second);
      txns_.erase(it);
      stats_.finished++;
      owned->done(std::move(owned->result));
    });
    return;
  }
  auto it = txns_.find(id);
  auto owned = std::move(it->second);
  txns_.erase(it);
  stats_.finished++;
  owned->done(std::move(r));
}

void UpstreamPool::on_deadline(uint64_t id) {
  auto it = txns_.find(id);
  if (it == txns_.end() || it->second->finished) return;
  Txn* t = it->second.get();
  t->deadline_timer = 0;
  const double timeout = t->req.timeout_s > 0 ? t->req.timeout_s : opts_.timeout_s;
  fail(t, "timed out after " + seconds(timeout) + " s" + (t->queued ? " (still queued; never sent)" : ""), true);
}

bool UpstreamPool::pause(uint64_t id, bool paused) {
  auto it = txns_.find(id);
  if (it == txns_.end() || !it->second->conn) return false;
  Conn* c = it->second->conn;
  if (c->connecting || c->closed || c->paused == paused) return true;
  c->paused = paused;
  const bool writing = c->out_pos < it->second->wire.size();
  set_events(c, (paused ? 0u : static_cast<uint32_t>(EPOLLIN)) | (writing ? static_cast<uint32_t>(EPOLLOUT) : 0u));
  return true;
}

bool UpstreamPool::cancel(uint64_t id) {
  auto it = txns_.find(id);
  if (it == txns_.end()) return false;
  Txn* t = it->second.get();
  Host* h = t->host;
  if (t->deadline_timer) loop_.cancel_timer(t->deadline_timer);
  if (Conn* c = t->conn) {  // mid-response: the connection cannot be reused
    c->txn = nullptr;
    close_conn(c);
  }
  if (t->queued && h) h->queue.erase(std::find(h->queue.begin(), h->queue.end(), t));
  const bool active = t->active;
  txns_.erase(it);
  stats_.finished++;
  if (active && h) {
    h->active--;
    ++in_api_;
    pump(h);
    --in_api_;
  }
  return true;
}

void UpstreamPool::release_to_idle(Conn* c) {
  Host* h = c->host;
  if (h->idle.size() >= opts_.max_idle_per_host) return close_conn(c);
  c->used = true;
  c->in.clear();
  c->in_pos = 0;
  set_events(c, EPOLLIN);  // readable while idle = closed by the server (or junk): dropped
  h->idle.push_back(c);
}

void UpstreamPool::close_conn(Conn* c) {
  if (c->closed) return;
  c->closed = true;
  if (c->connect_timer) loop_.cancel_timer(c->connect_timer);
  c->connect_timer = 0;
  loop_.unwatch(c->fd);
  ::close(c->fd);
  auto& idle = c->host->idle;
  idle.erase(std::remove(idle.begin(), idle.end(), c), idle.end());
  auto it = conns_.find(c->fd);
  if (it != conns_.end()) {
    graveyard_.push_back(std::move(it->second));
    conns_.erase(it);
  }
}

}  // namespace rl::net
