// A small HTTP server for a few texts that change now and then (the trainer's
// Prometheus /metrics, rl.metrics.serve): rl::net::EventServer on a thread and
// loop of its own, so a slow or hostile client costs the process a socket, never
// a thread or the Lua loop, and the texts are answered without any Lua running.
//
//   net::TextServer srv({.port = 0});
//   srv.set("/metrics", "text/plain; version=0.0.4", text);   // any thread, any time
//   ... srv.url() ...; srv.stop();
//
// GET and HEAD of a set path answer its text; other paths 404, other methods 405.
// Limits as the engine's server: request bodies up to max_body_bytes (beyond:
// 413 from the head alone, nothing read), header/body deadline (408), idle
// keep-alive timeout, a cap on connections. Loopback only unless allow_remote.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/event_loop.hpp"
#include "net/event_server.hpp"

namespace rl::net {

class TextServer {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    int port = 0;
    bool allow_remote = false;
    size_t max_connections = 256;
    size_t max_body_bytes = 64 * 1024;
    double header_timeout_s = 30;
    double idle_timeout_s = 300;
    std::string name = "text server";
    std::string not_found_hint;  // appended to 404 messages ("try GET /metrics")
  };

  // Binds and starts serving; throws std::runtime_error (port in use, remote host).
  explicit TextServer(Options opts);
  ~TextServer();  // stop()
  TextServer(const TextServer&) = delete;
  TextServer& operator=(const TextServer&) = delete;

  // Sets (or replaces) the text served at `path`. Thread-safe.
  void set(const std::string& path, std::string content_type, std::string body);
  std::string url() const { return url_; }
  int port() const { return port_; }
  // Closes the listening socket and every connection, joins the thread. Idempotent.
  void stop();

 private:
  void handle(ServerRequest& req, const std::shared_ptr<Responder>& res);

  struct Entry {
    std::string content_type;
    std::shared_ptr<const std::string> body;
  };
  Options opts_;
  EventLoop loop_;
  std::unique_ptr<EventServer> server_;
  std::thread thread_;
  std::mutex mu_;
  std::map<std::string, Entry> texts_;
  std::string url_;
  int port_ = 0;
  bool running_ = false;
};

}  // namespace rl::net
