// Non-blocking HTTP client: libcurl's multi-socket interface driven by the
// process's rl::EventLoop (fd watchers + one timer), everything on the loop
// thread. Knows nothing of Lua; bindings/core_http.cpp wraps it.
//
// Why our own per-host FIFO queue instead of CURLMOPT_MAX_HOST_CONNECTIONS:
// we need the time a request waits for a slot to count against its total
// timeout (a request that expires while queued fails without being sent), a
// per-request limit, and visible queue/active counters for metrics.
//
// Callbacks (done, on_chunk) are never called from inside libcurl nor from
// inside submit()/cancel(): they run from the loop after curl has returned, so
// they may freely submit or cancel other requests (libcurl forbids re-entrant
// multi calls from its own callbacks).
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/event_loop.hpp"

namespace rl::net {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method = "GET";
  std::string url;
  HeaderList headers;  // sent as given
  std::string body;
  // Sent instead of `body` when set: bytes many requests share (one weight bucket to
  // every engine) without a copy each. Held until the transfer ends.
  std::shared_ptr<const std::string> shared_body;
  double timeout_s = 0;          // total, queue time included; 0 = the client's default
  double connect_timeout_s = 0;  // 0 = the client's default
  int max_per_host = 0;          // 0 = the client's default
  bool follow_redirects = false;
  // A connection of its own, closed afterwards. libcurl resends a request by itself
  // when a reused keep-alive connection turns out to be closed; a request that must
  // reach the server at most once (not idempotent) asks for a fresh connection,
  // which libcurl never resends on.
  bool fresh_connection = false;
  size_t max_body_bytes = 0;     // response body cap (streamed bytes count too); 0 = none
};

struct HttpTimings {
  double queued_s = 0;   // submit -> handed to curl
  double connect_s = 0;  // curl: TCP connect done (0 on a reused connection)
  double ttfb_s = 0;     // curl: first response byte
  double total_s = 0;    // submit -> completion (queue included)
};

struct HttpResponse {
  long status = 0;
  HeaderList headers;  // names lowercased, in arrival order (repeats kept)
  std::string body;    // empty when streamed through on_chunk
  HttpTimings timings;
};

struct HttpResult {
  bool ok = false;
  bool timed_out = false;
  // The failure came after the request reached the server (connected and bytes
  // sent): it may have acted on it, or the request may be what broke it.
  bool sent = false;
  std::string error;  // "GET http://host/path: <what> (<curl detail>)" when !ok
  HttpResponse response;
};

class HttpClient {
 public:
  using DoneFn = std::function<void(HttpResult&&)>;
  using ChunkFn = std::function<void(std::string_view)>;

  struct Options {
    int max_per_host = 64;           // active transfers per host:port; the rest wait FIFO
    long max_connections = 4096;     // curl connection cache (idle keep-alive connections kept)
    double timeout_s = 600;          // default total timeout
    double connect_timeout_s = 30;   // default connect timeout
    size_t max_free_handles = 256;   // easy handles kept for reuse
    bool use_env_proxy = false;      // honour http_proxy & co (off: engine/router traffic is local)
  };

  struct Stats {
    uint64_t submitted = 0;           // submit() calls
    uint64_t started = 0;             // requests handed to curl
    uint64_t finished = 0;            // requests that ended: done delivered, or cancelled
    uint64_t cancelled = 0;           // of which cancelled
    uint64_t connections_opened = 0;  // sum of CURLINFO_NUM_CONNECTS
    size_t queued = 0;                // waiting for a per-host slot now
    size_t active = 0;                // inside curl now
  };

  explicit HttpClient(EventLoop& loop) : HttpClient(loop, Options{}) {}
  HttpClient(EventLoop& loop, Options opts);
  ~HttpClient();  // drops every request without calling its callbacks
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Starts (or queues) a request; returns its id (never 0). `done` is called
  // exactly once unless the request is cancelled. With `on_chunk`, body bytes
  // are passed to it as they arrive and the response body stays empty.
  uint64_t submit(HttpRequest req, DoneFn done, ChunkFn on_chunk = {});
  // Drops a request (queued or active); its callbacks are not called. Returns
  // false for unknown or finished ids.
  bool cancel(uint64_t id);

  // The response of an unfinished request so far: status and headers once its
  // header block has arrived (status 0 before), e.g. from inside on_chunk.
  // nullptr for unknown or finished ids.
  const HttpResponse* peek(uint64_t id) const;

  Stats stats() const;
  const Options& options() const { return opts_; }
  // New defaults for later requests (queued and active ones keep theirs).
  void set_options(const Options& opts);
  EventLoop& loop() const { return loop_; }

 private:
  struct Transfer;
  struct Host {
    int active = 0;
    std::list<Transfer*> queue;
  };

  static int on_socket(void* easy, int fd, int what, void* self, void* socketp);
  static int on_timer(void* multi, long timeout_ms, void* self);

  void start(Transfer* t);
  void pump_host(const std::string& key);
  void socket_action(int fd, int ev_bitmask);
  void collect_finished();
  void run_callbacks();
  void release(Transfer* t);
  void finish(Transfer* t, HttpResult&& result);
  void expire_queued(uint64_t id);
  void schedule_callbacks();
  void* take_easy();
  void give_back_easy(void* easy);

  EventLoop& loop_;
  Options opts_;
  void* multi_ = nullptr;  // CURLM*
  uint64_t next_id_ = 1;
  uint64_t curl_timer_ = 0;
  std::unordered_map<uint64_t, std::unique_ptr<Transfer>> transfers_;
  std::unordered_map<std::string, Host> hosts_;
  std::vector<void*> free_easy_;
  // Events gathered while curl runs, delivered once it has returned.
  std::vector<uint64_t> chunk_ready_;
  std::vector<uint64_t> done_ready_;
  uint64_t callbacks_timer_ = 0;
  bool in_callbacks_ = false;
  std::unordered_set<int> watched_;  // fds curl asked us to watch (unwatched on destruction)
  Stats stats_;
};

}  // namespace rl::net
