// A lean HTTP/1.1 client for proxying to plain-http upstreams (the router's
// hot path), on an rl::EventLoop, with keep-alive connection pools per host.
//
// Why not HttpClient (libcurl) here: profiling the router at 32 connections put
// ~30% of its CPU in libcurl (URL parsing, header scanning, a poll() per reused
// connection, timer bookkeeping) and much of the malloc time too — per request,
// for features a local proxy never uses (TLS, redirects, proxies, auth). This
// client does only what relaying needs: one request per connection at a time,
// Content-Length / chunked / close-delimited response bodies, idle connections
// kept and reused LIFO, a stale reused connection retried once on a fresh one.
// HttpClient stays the general client (and serves https:// workers).
//
// Same calling convention as HttpClient: submit() returns an id; `done` is
// called once (not after cancel()); `on_chunk` gets body bytes as they arrive
// (decoded from chunked); peek() shows status and headers once they are in.
// Callbacks run on the loop thread from fd events or timers — never from inside
// submit() or cancel() — and may submit or cancel freely.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/event_loop.hpp"
#include "net/http_client.hpp"

namespace rl::net {

class UpstreamPool {
 public:
  struct Options {
    double timeout_s = 600;          // whole request (queue + connect + response)
    double connect_timeout_s = 5;
    int max_per_host = 2048;         // requests in flight per host; the rest queue FIFO
    size_t max_idle_per_host = 1024; // idle keep-alive connections kept
    size_t max_head_bytes = 64 * 1024;
  };
  struct Stats {
    uint64_t submitted = 0, finished = 0, connections_opened = 0, reused = 0, stale_retries = 0;
    size_t idle = 0, active = 0, queued = 0;
  };

  UpstreamPool(EventLoop& loop, Options opts);
  ~UpstreamPool();  // closes everything; no callbacks
  UpstreamPool(const UpstreamPool&) = delete;
  UpstreamPool& operator=(const UpstreamPool&) = delete;

  // `req.url` must be http://host:port/path (host numeric, or a name resolved
  // once and cached). Errors (bad URL, refused, reset, timeout) come via `done`.
  uint64_t submit(HttpRequest req, HttpClient::DoneFn done, HttpClient::ChunkFn on_chunk = {});
  bool cancel(uint64_t id);
  const HttpResponse* peek(uint64_t id) const;
  // Back-pressure: stop (or resume) reading the response of `id` from its
  // socket, so a slow consumer makes the upstream's TCP window close instead of
  // our buffers grow. False for unknown ids or requests without a connection.
  bool pause(uint64_t id, bool paused);
  Stats stats() const;

  struct Txn;
  struct Conn;
  struct Host;

 private:
  void start(Txn* t);
  void connect_new(Txn* t);
  void on_io(Conn* c, uint32_t events);
  void on_readable(Conn* c);
  void send_request(Conn* c);
  bool parse(Conn* c);  // false: the connection is gone
  void complete(Txn* t, bool reusable);
  void fail(Txn* t, std::string what, bool timed_out = false);
  void close_conn(Conn* c);
  void release_to_idle(Conn* c);
  void pump(Host* h);
  void finish(Txn* t, HttpResult&& r);
  void on_deadline(uint64_t id);
  Host* host_for(const std::string& url, std::string& path, std::string& error);
  void set_events(Conn* c, uint32_t ev);

  EventLoop& loop_;
  Options opts_;
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, std::unique_ptr<Txn>> txns_;
  std::unordered_map<std::string, std::unique_ptr<Host>> hosts_;
  std::unordered_map<int, std::unique_ptr<Conn>> conns_;
  std::vector<std::unique_ptr<Conn>> graveyard_;  // closed while maybe still on the stack
  int in_api_ = 0;  // inside submit()/cancel(): completions are deferred to the loop
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // deferred completions check it
  Stats stats_;
};

}  // namespace rl::net
