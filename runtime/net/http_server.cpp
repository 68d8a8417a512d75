#include "net/http_server.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "base/errors.hpp"

namespace rl::net {

namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// "addr:port" of a peer, formatted like httplib's Request::remote_addr/port.
std::string peer_key(const sockaddr_storage& addr, socklen_t len) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof host, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return {};
  return std::string(host) + ":" + serv;
}

// Port of a socket's local address, or -1 (not an inet socket).
int local_port(int fd, sockaddr_storage& addr) {
  socklen_t len = sizeof addr;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return -1;
}

// Reaches httplib's listening socket, to close it when bind() was never
// followed by start() (httplib's own stop() only acts on a running server).
struct BindableServer : httplib::Server {
  // httplib listens with a backlog of 5: a burst of connects (a client opening
  // its per-host limit of 64 at once) would see SYNs dropped and 1 s retries.
  void widen_backlog(int n) { ::listen(svr_sock_, n); }
  void close_unused_listener() {
    const socket_t sock = svr_sock_.exchange(INVALID_SOCKET);
    if (sock != INVALID_SOCKET) ::close(sock);
  }
};

}  // namespace

// ---- AsyncExchange ---------------------------------------------------------------
bool AsyncExchange::respond(AsyncResponse resp) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_ || resp_) return false;
    resp_ = std::move(resp);
  }
  cv_.notify_all();
  return true;
}

AsyncExchange::Outcome AsyncExchange::wait(double timeout_s, AsyncResponse& out) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  cv_.wait_until(lock, deadline, [&] { return resp_.has_value() || cancelled_; });
  closed_ = true;
  if (resp_) {
    out = std::move(*resp_);
    return Outcome::responded;
  }
  return cancelled_ ? Outcome::cancelled : Outcome::timed_out;
}

void AsyncExchange::cancel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
  }
  cv_.notify_all();
}

// ---- HttpServer ------------------------------------------------------------------
bool HttpServer::is_loopback(const std::string& host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  in_addr a{};
  if (inet_pton(AF_INET, host.c_str(), &a) == 1) return (ntohl(a.s_addr) >> 24) == 127;
  return false;
}

// What a response may be compressed with. The packaged httplib (0.11) compresses
// every text response with Brotli at quality 11 when the client accepts "br" (every
// browser does): ~10 s per MB, so the trace viewer's page of a few MB timed out.
// Brotli is never offered to httplib; loopback clients get no compression at all
// (it only costs CPU on both ends); others may still get gzip.
static void limit_compression(httplib::Request& req) {
  auto it = req.headers.find("Accept-Encoding");
  if (it == req.headers.end()) return;
  const bool loopback = req.remote_addr.rfind("127.", 0) == 0 || req.remote_addr == "::1";
  if (loopback || it->second.find("gzip") == std::string::npos) {
    req.headers.erase("Accept-Encoding");
  } else {
    it->second = "gzip";
  }
}

HttpServer::HttpServer(HttpServerOptions opts) : opts_(std::move(opts)), svr_(std::make_unique<BindableServer>()) {
  if (opts_.threads < 1) throw Error(opts_.name + ": threads must be >= 1");
  const size_t threads = static_cast<size_t>(opts_.threads);
  svr_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // Small JSON answers must not wait for Nagle + delayed ACK (~40 ms).
  svr_->set_tcp_nodelay(true);
  // httplib's default adds SO_REUSEPORT, which lets a second server bind a port
  // in use and silently take half its connections. SO_REUSEADDR alone still
  // allows a restart while old connections sit in TIME_WAIT.
  svr_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  svr_->set_keep_alive_max_count(opts_.keep_alive_max_requests);
  svr_->set_keep_alive_timeout(static_cast<time_t>(std::max(1.0, opts_.keep_alive_timeout_s)));
  svr_->set_payload_max_length(opts_.max_body_bytes);
  // Connections with a request in progress, so stop() lets them finish (see
  // close_connections). From routing to after the response is written.
  svr_->set_pre_routing_handler([busy = busy_, statics = statics_](const httplib::Request& req, httplib::Response& res) {
    {
      std::lock_guard<std::mutex> lock(busy->mu);
      busy->peers.insert(req.remote_addr + ":" + std::to_string(req.remote_port));
    }
    limit_compression(const_cast<httplib::Request&>(req));  // httplib owns a mutable Request
    for (const auto& s : *statics) {  // only filled before bind(): no lock needed
      if (auto r = s->serve(req.method, req.path)) {
        res.status = r->status;
        res.set_content(r->body, r->content_type);
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  svr_->set_logger([busy = busy_](const httplib::Request& req, const httplib::Response&) {
    std::lock_guard<std::mutex> lock(busy->mu);
    busy->peers.erase(req.remote_addr + ":" + std::to_string(req.remote_port));
  });
  const std::string name = opts_.name;
  svr_->set_exception_handler([name](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    spdlog::error("{}: {} {} failed: {}", name, req.method, req.path, what);
    res.status = 500;
    res.set_content("internal server error (see the server log)\n", "text/plain; charset=utf-8");
  });
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::route(const std::string& method, const std::string& pattern, Handler handler) {
  if (bound_) throw Error(opts_.name + ": route() after bind()/start()");
  if (method == "GET") svr_->Get(pattern, std::move(handler));
  else if (method == "POST") svr_->Post(pattern, std::move(handler));
  else if (method == "PUT") svr_->Put(pattern, std::move(handler));
  else if (method == "PATCH") svr_->Patch(pattern, std::move(handler));
  else if (method == "DELETE") svr_->Delete(pattern, std::move(handler));
  else if (method == "OPTIONS") svr_->Options(pattern, std::move(handler));
  else throw Error(opts_.name + ": unsupported method '" + method + "'", "use GET, POST, PUT, PATCH, DELETE or OPTIONS");
}

void HttpServer::serve_async(EventLoop& loop, AsyncHandler on_request, AsyncHandler on_abandoned) {
  if (bound_) throw Error(opts_.name + ": serve_async() after bind()/start()");
  async_ = std::make_shared<Async>();
  async_->loop = &loop;
  async_->on_request = std::move(on_request);
  async_->on_abandoned = std::move(on_abandoned);
  async_->timeout_s = opts_.async_timeout_s;
  async_->name = opts_.name;
}

void HttpServer::serve_static(const std::string& dir, const std::string& mount) {
  if (bound_) throw Error(opts_.name + ": serve_static() after bind()/start()");
  try {
    statics_->push_back(std::make_unique<StaticFiles>(dir, mount));
  } catch (const Error& e) {
    throw Error(opts_.name + ": " + e.what());
  }
}

std::string HttpServer::url() const {
  const bool v6 = opts_.host.find(':') != std::string::npos && opts_.host.front() != '[';
  return "http://" + (v6 ? "[" + opts_.host + "]" : opts_.host) + ":" + std::to_string(port_);
}

void HttpServer::bind() {
  if (bound_) return;
  if (!opts_.allow_remote && !is_loopback(opts_.host))
    throw Error(opts_.name + ": refusing to bind '" + opts_.host + "': not a loopback address",
                "rlhost servers have no authentication, so they bind 127.0.0.1 unless told otherwise; "
                "set allow_remote=true to expose this one (and protect it with a token or a firewall)");
  if (async_) {
    // Registered last, so explicit routes win; static mounts are checked by
    // httplib before any handler.
    auto fn = [this](const httplib::Request& req, httplib::Response& res) { handle_async(req, res); };
    for (const char* m : {"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}) route(m, ".*", fn);
  }
  errno = 0;
  if (opts_.port == 0) {
    port_ = svr_->bind_to_any_port(opts_.host);
  } else {
    port_ = svr_->bind_to_port(opts_.host, opts_.port) ? opts_.port : -1;
  }
  if (port_ <= 0) {
    const int err = errno;
    port_ = 0;
    throw Error(opts_.name + ": cannot listen on " + opts_.host + ":" + std::to_string(opts_.port) +
                    (err ? std::string(" (") + std::strerror(err) + ")" : ""),
                opts_.port ? "is another process using that port? port=0 picks a free one" : "");
  }
  static_cast<BindableServer*>(svr_.get())->widen_backlog(opts_.backlog);
  bound_ = true;
}

void HttpServer::start() {
  if (started_) throw Error(opts_.name + ": already started");
  bind();
  started_ = true;
  thread_ = std::thread([svr = svr_.get()] { svr->listen_after_bind(); });
  // stop() is a no-op until httplib marks itself running: wait for that, so a
  // stop() right after start() cannot be lost.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!svr_->is_running() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
}

void HttpServer::handle_async(const httplib::Request& req, httplib::Response& res) {
  auto a = async_;
  AsyncRequest r;
  r.method = req.method;
  r.path = req.path;
  if (auto q = req.target.find('?'); q != std::string::npos) r.query = req.target.substr(q + 1);
  for (auto& [k, v] : req.headers)
    if (k != "REMOTE_ADDR" && k != "REMOTE_PORT" && k != "LOCAL_ADDR" && k != "LOCAL_PORT")  // httplib's own
      r.headers.emplace_back(lower(k), v);
  r.body = req.body;
  r.remote_addr = req.remote_addr;
  r.remote_port = req.remote_port;
  auto ex = std::make_shared<AsyncExchange>(std::move(r));
  {
    std::lock_guard<std::mutex> lock(a->mu);
    if (a->stopping) {
      res.status = 503;
      res.set_content("server stopping\n", "text/plain; charset=utf-8");
      return;
    }
    a->waiting.insert(ex.get());
  }
  a->loop->post([a, ex] {
    if (a->alive) a->on_request(ex);
  });
  AsyncResponse out;
  const auto outcome = ex->wait(a->timeout_s, out);
  {
    std::lock_guard<std::mutex> lock(a->mu);
    a->waiting.erase(ex.get());
  }
  switch (outcome) {
    case AsyncExchange::Outcome::responded: {
      res.status = out.status;
      bool has_type = false;
      for (auto& [k, v] : out.headers) {
        const std::string name = lower(k);
        // Framing headers are httplib's to write; a copy from the handler would be a duplicate.
        if (name == "content-length" || name == "transfer-encoding" || name == "connection" || name == "keep-alive")
          continue;
        if (name == "content-type") has_type = true;
        res.set_header(k, v);
      }
      if (!has_type && !out.body.empty()) res.set_header("Content-Type", "text/plain; charset=utf-8");
      res.body = std::move(out.body);
      return;
    }
    case AsyncExchange::Outcome::timed_out:
      spdlog::warn("{}: {} {}: no answer from the handler within {} s; replied 503", a->name, req.method, req.path,
                   a->timeout_s);
      res.status = 503;
      res.set_content("handler did not answer in time\n", "text/plain; charset=utf-8");
      if (a->on_abandoned)
        a->loop->post([a, ex] {
          if (a->alive) a->on_abandoned(ex);
        });
      return;
    case AsyncExchange::Outcome::cancelled:
      res.status = 503;
      res.set_content("server stopping\n", "text/plain; charset=utf-8");
      return;
  }
}

// Idle keep-alive connections hold a worker until their keep-alive timeout, and
// httplib 0.11 only re-checks for stop() between requests. Shutting the read
// side of our idle accepted sockets makes their workers see EOF and return at
// once. Busy connections (a request between routing and its response written,
// e.g. the 503 of a cancelled async request) are left alone: httplib refuses to
// write to a socket that reads EOF. Sockets are found by local port; each
// candidate is dup()ed first so the checks and the shutdown act on the same
// socket even if a worker closes the fd and the number is reused meanwhile.
void HttpServer::close_connections() {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return;
  std::vector<int> fds;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end != e->d_name && *end == 0 && fd != dirfd(d)) fds.push_back(static_cast<int>(fd));
  }
  closedir(d);
  std::lock_guard<std::mutex> lock(busy_->mu);
  for (int fd : fds) {
    const int dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup < 0) continue;
    sockaddr_storage local{}, peer{};
    socklen_t plen = sizeof peer;
    int listening = 0;
    socklen_t llen = sizeof listening;
    if (local_port(dup, local) == port_ && getpeername(dup, reinterpret_cast<sockaddr*>(&peer), &plen) == 0 &&
        getsockopt(dup, SOL_SOCKET, SO_ACCEPTCONN, &listening, &llen) == 0 && !listening &&
        !busy_->peers.count(peer_key(peer, plen)))
      ::shutdown(dup, SHUT_RD);  // httplib treats the socket as dead; its worker returns
    ::close(dup);
  }
}

void HttpServer::stop() {
  if (async_) {
    async_->alive = false;
    std::lock_guard<std::mutex> lock(async_->mu);
    async_->stopping = true;
    for (auto* ex : async_->waiting) ex->cancel();
  }
  if (!thread_.joinable()) {
    if (bound_) static_cast<BindableServer*>(svr_.get())->close_unused_listener();
    bound_ = false;
    return;
  }
  svr_->stop();  // closes the listening socket: no new connections
  close_connections();
  thread_.join();  // httplib joins its workers before listen_after_bind returns
}

}  // namespace rl::net
