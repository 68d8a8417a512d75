// A small layer over cpp-httplib for rlhost's servers (engine, router, trace
// viewer, Lua `rl.http.serve`): loopback by default, ephemeral ports, a sized
// worker pool, static files with proper MIME types, prompt stop(), and an
// "async" mode that hands each request to the rl::EventLoop thread.
//
// Threads: httplib runs one listener thread plus a pool of workers; a worker
// owns a connection for as long as it is kept alive. Sync handlers run on the
// workers. Async handlers run on the loop thread only: the worker posts the
// request to the loop and blocks until the loop side responds (or a timeout
// gives 503), so code that must stay on the loop (Lua) never runs elsewhere.
#pragma once

#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/event_loop.hpp"
#include "base/live_objects.hpp"
#include "net/http_client.hpp"  // HeaderList
#include "net/static_files.hpp"

namespace rl::net {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;                 // 0: an ephemeral port (see HttpServer::port())
  int threads = 64;             // workers; each holds one keep-alive connection while it lasts
  bool allow_remote = false;    // required to bind anything but a loopback address
  double async_timeout_s = 300; // async mode: no answer from the loop by then -> 503
  double keep_alive_timeout_s = 5;
  size_t keep_alive_max_requests = 100000;
  size_t max_body_bytes = size_t{256} << 20;
  int backlog = 1024;           // pending connections the kernel queues before accept
  std::string name = "http server";  // used in errors and logs
};

struct AsyncRequest {
  std::string method;
  std::string path;    // without the query string
  std::string query;   // raw, after '?', may be empty
  HeaderList headers;  // names lowercased
  std::string body;
  std::string remote_addr;
  int remote_port = 0;
};

struct AsyncResponse {
  int status = 200;
  HeaderList headers;
  std::string body;
};

// One request in async mode, shared by the waiting worker and the loop side.
class AsyncExchange {
 public:
  explicit AsyncExchange(AsyncRequest req) : req_(std::move(req)) {}
  const AsyncRequest& request() const { return req_; }
  // Any thread. False when no worker waits any more (timed out, server stopped):
  // the response is dropped.
  bool respond(AsyncResponse resp);
  uint64_t tag = 0;  // free for the loop-side owner (e.g. a request id)

  // Worker side.
  enum class Outcome { responded, timed_out, cancelled };
  Outcome wait(double timeout_s, AsyncResponse& out);
  void cancel();  // wakes the worker without a response

 private:
  AsyncRequest req_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<AsyncResponse> resp_;
  bool closed_ = false;  // the worker stopped waiting
  bool cancelled_ = false;
  LiveObject counted_;   // in-flight request state crosses into Lua: tests count it
};
using AsyncExchangePtr = std::shared_ptr<AsyncExchange>;

class HttpServer {
 public:
  using Handler = httplib::Server::Handler;                  // worker thread
  using AsyncHandler = std::function<void(AsyncExchangePtr)>;  // loop thread

  explicit HttpServer(HttpServerOptions opts = {});
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Before start(). `method` is GET, POST, PUT, PATCH, DELETE or OPTIONS (HEAD
  // is served by GET routes); `pattern` is a regex matched against the path.
  void route(const std::string& method, const std::string& pattern, Handler handler);
  // Every request no route or static file answers goes to `on_request` on the
  // loop thread. `on_abandoned` (loop thread) hears of exchanges whose worker
  // stopped waiting (timeout), so the owner can forget them.
  void serve_async(EventLoop& loop, AsyncHandler on_request, AsyncHandler on_abandoned = {});
  // Serves regular files under `dir` at URL prefix `mount` (net/static_files.hpp:
  // nothing outside `dir`, symlinks included). Throws rl::Error if `dir` is not
  // a directory.
  void serve_static(const std::string& dir, const std::string& mount = "/");
  // For what this layer does not wrap (streaming responses, ...). Leave the
  // pre-routing handler and the logger alone: stop() relies on them.
  httplib::Server& raw() { return *svr_; }

  // Binds the listening socket (port() is known afterwards) without serving
  // yet: connections wait in the kernel's backlog until start(). Throws
  // rl::Error (remote host without allow_remote, port in use, ...).
  void bind();
  // Starts serving (binds first if needed). Throws like bind().
  void start();
  // Stops accepting, answers waiting async requests with 503, closes open
  // connections, joins the threads. Idempotent. With async mode, call it on the
  // loop thread (or after the loop stopped) so no async handler runs meanwhile.
  void stop();

  bool running() const { return thread_.joinable(); }
  int port() const { return port_; }
  const std::string& host() const { return opts_.host; }
  std::string url() const;  // "http://127.0.0.1:PORT" (IPv6 hosts bracketed)
  const HttpServerOptions& options() const { return opts_; }

  // True for 127.0.0.0/8, ::1 and "localhost".
  static bool is_loopback(const std::string& host);

 private:
  struct Async {
    EventLoop* loop = nullptr;
    AsyncHandler on_request;
    AsyncHandler on_abandoned;
    double timeout_s = 0;
    std::string name;
    std::atomic<bool> alive{true};  // cleared by stop(): loop-side closures become no-ops
    std::mutex mu;
    bool stopping = false;
    std::unordered_set<AsyncExchange*> waiting;  // exchanges a worker waits on
  };
  struct Busy {
    std::mutex mu;
    std::unordered_set<std::string> peers;  // "addr:port" with a request in progress
  };
  void handle_async(const httplib::Request& req, httplib::Response& res);
  void close_connections();

  HttpServerOptions opts_;
  std::unique_ptr<httplib::Server> svr_;
  std::shared_ptr<Async> async_;
  std::shared_ptr<Busy> busy_ = std::make_shared<Busy>();
  // Answered in the pre-routing handler, before httplib's own file serving
  // (which follows symlinks out and truncates paths at a NUL).
  std::shared_ptr<std::vector<std::unique_ptr<StaticFiles>>> statics_ =
      std::make_shared<std::vector<std::unique_ptr<StaticFiles>>>();
  std::thread thread_;
  int port_ = 0;
  bool bound_ = false;
  bool started_ = false;
};

}  // namespace rl::net
