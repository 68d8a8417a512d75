// Event-driven HTTP/1.1 server on an rl::EventLoop: no thread per connection.
//
// Why not HttpServer (cpp-httplib): httplib holds a thread per keep-alive
// connection, so 10,000 concurrent clients would need 10,000 threads. Here every
// socket is a non-blocking fd watched by the loop; a request is handed to the
// handler on the loop thread together with a Responder that answers it now or
// later (after upstream I/O), whole or as a stream of chunks.
//
// Per connection: keep-alive, Content-Length and chunked request bodies,
// pipelined requests answered strictly in order (the next one is parsed only
// after the current response ended), size limits (431/413), idle and
// header/body-read timeouts, a cap on open connections, write back-pressure through EPOLLOUT with an
// on_drain() hook. Loopback-only unless allow_remote.
//
// Threading: everything, Responder included, is used on the loop's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/event_loop.hpp"
#include "net/http_parser.hpp"

namespace rl::net {

class EventServer;
struct ServerConn;

using ResponseHeaders = std::vector<std::pair<std::string, std::string>>;

// Answers one request. Obtained by the handler; may be kept and used later
// (from the loop thread). When the client goes away first, alive() turns false,
// on_close fires, and further calls are ignored.
class Responder {
 public:
  // Whole response with Content-Length.
  void send(int status, const ResponseHeaders& headers, std::string_view body);
  // Convenience: JSON body (`body` already encoded).
  void send_json(int status, std::string_view body) { send(status, {{"Content-Type", "application/json"}}, body); }
  // Starts a streamed response: with `content_length` the body is sent as is,
  // otherwise with chunked transfer coding (or until close for an HTTP/1.0 client).
  void start(int status, const ResponseHeaders& headers, std::optional<size_t> content_length = std::nullopt);
  // Queues body bytes (one chunk each) and flushes what the socket takes now.
  void write(std::string_view bytes);
  // Ends the streamed response (last chunk); the connection goes on with the next request.
  void end();
  // Ends abruptly: closes the connection without completing the response, so the
  // client sees a truncated body rather than a well-formed short one.
  void abort();

  bool alive() const { return conn_ != nullptr; }
  bool started() const { return started_; }
  bool finished() const { return finished_; }
  // Bytes written but not yet taken by the socket (for back-pressure).
  size_t buffered() const;
  // Called once the output buffer has drained below the low watermark.
  void on_drain(std::function<void()> fn) { on_drain_ = std::move(fn); }
  // Called if the connection closes before the response was finished.
  void on_close(std::function<void()> fn) { on_close_ = std::move(fn); }

 private:
  friend class EventServer;
  friend struct ServerConn;
  ServerConn* conn_ = nullptr;
  bool started_ = false;
  bool finished_ = false;
  bool chunked_ = false;
  bool head_request_ = false;
  int minor_ = 1;
  std::function<void()> on_drain_;
  std::function<void()> on_close_;
};

class EventServer {
 public:
  using Handler = std::function<void(ServerRequest& req, std::shared_ptr<Responder> res)>;

  struct Options {
    std::string host = "127.0.0.1";
    int port = 0;                       // 0 = an ephemeral port
    bool allow_remote = false;          // needed to bind anything but loopback
    RequestParser::Limits limits;
    double idle_timeout_s = 60;         // keep-alive connection with no request in progress
    double header_timeout_s = 30;       // a request started but not complete (slowloris)
    size_t max_connections = 20000;     // beyond: accepted and closed at once
    size_t read_buffer_limit = 1 << 20; // unparsed input held while a response is pending
    size_t write_low_watermark = 64 * 1024;
    int backlog = 4096;
    std::string name = "http server";   // for messages
  };

  struct Stats {
    uint64_t accepted = 0;
    uint64_t requests = 0;
    uint64_t bad_requests = 0;   // answered 4xx/5xx by the parser
    uint64_t timeouts = 0;       // connections closed by idle/header timeouts
    uint64_t rejected = 0;       // over max_connections
    size_t open = 0;
  };

  EventServer(EventLoop& loop, Options opts, Handler handler);
  ~EventServer();
  EventServer(const EventServer&) = delete;
  EventServer& operator=(const EventServer&) = delete;

  // Binds and listens (throws std::runtime_error naming host:port and the reason).
  void start();
  // Closes the listening socket and every connection (pending responders die).
  void stop();
  // Closes the listening socket only: open connections are served until they
  // close (graceful shutdown). Loop thread.
  void stop_accepting();
  int port() const { return port_; }
  std::string url() const;
  Stats stats() const;
  EventLoop& loop() const { return loop_; }

 private:
  friend class Responder;
  friend struct ServerConn;
  void on_accept();
  void on_io(int fd, uint32_t events);
  void process(ServerConn* c);
  void flush(ServerConn* c);
  void close_conn(ServerConn* c);
  void sweep();
  void reject(ServerConn* c, int status, const std::string& message);
  void response_done(ServerConn* c);

  EventLoop& loop_;
  Options opts_;
  Handler handler_;
  int listen_fd_ = -1;
  int port_ = 0;
  uint64_t sweep_timer_ = 0;
  std::unordered_map<int, std::unique_ptr<ServerConn>> conns_;
  std::vector<std::unique_ptr<ServerConn>> graveyard_;  // closed during a callback, freed later
  Stats stats_;
};

const char* status_reason(int status);

}  // namespace rl::net
