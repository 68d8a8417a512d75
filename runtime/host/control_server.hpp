// The control socket of a running rlhost: how `rlhost attach` reaches it.
// Lua-agnostic; bindings/core_control.cpp turns requests into Lua tasks.
//
// Transport: a Unix stream socket (mode 0600, in a 0700 directory, peers with
// another uid refused), and optionally TCP on 127.0.0.1 only, where every
// connection must present the token before anything else is accepted.
//
// Protocol: newline-delimited JSON objects both ways (docs/attach.md).
//   request   {"id": 1, "op": "eval"|"complete?"|"interrupt"|"info", "code": "...", "token": "..."}
//   response  {"id": 1, "ok": true, "values": ["..."], "output": "...", "error": "...",
//              "incomplete": false}            ("info" answers with an "info" object)
// Responses carry the request's id; several requests may be in flight per
// connection and responses may come back in any order. A message longer than
// 16 MiB is refused (and the connection closed); a malformed one gets an error
// response and the connection stays usable.
//
// Everything runs on the event loop: no threads, non-blocking sockets, partial
// reads and writes buffered per client.
#pragma once

#include <nlohmann/json.hpp>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/event_loop.hpp"

namespace rl {

// One request for the embedder ("eval", "complete?" or "interrupt").
struct ControlRequest {
  uint64_t client = 0;   // connection id, never 0
  uint64_t request = 0;  // pass back to respond()
  std::string op;
  std::string code;
};

struct ControlReply {
  bool ok = true;
  std::vector<std::string> values;
  std::string output;
  std::string error;
  bool incomplete = false;
};

class ControlServer {
 public:
  struct Options {
    bool unix_socket = true;
    std::string socket_path;           // "" = control::default_socket_path(getpid())
    std::optional<int> tcp_port;       // 127.0.0.1:port; 0 picks a free port
    std::string token;                 // "" = $RLHOST_CONTROL_TOKEN, else a random one
    bool announce_token = true;        // print a generated token to stderr
    bool write_record = true;          // <pid>.json in the runtime directory
    std::string script;                // for the record and "info"
    std::vector<std::string> argv;
    size_t max_message = size_t{16} << 20;
    size_t max_clients = 64;
  };
  using RequestFn = std::function<void(const ControlRequest&)>;
  using DisconnectFn = std::function<void(uint64_t client)>;

  ControlServer(EventLoop& loop, Options opts);
  ~ControlServer();  // stop()
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Handlers run on the loop, from socket callbacks only: never from inside
  // respond() or another call the embedder makes.
  void set_handlers(RequestFn on_request, DisconnectFn on_disconnect);

  // Binds and listens; throws rl::Error with the path and a hint on failure.
  void start();
  // Closes every connection, removes the socket, record and token files.
  void stop();

  // Sends the reply to `request`. Dropped silently when the client is gone.
  void respond(uint64_t request, const ControlReply& reply);

  const std::string& socket_path() const { return socket_path_; }
  int tcp_port() const { return tcp_port_; }
  const std::string& token() const { return token_; }
  const std::string& token_path() const { return token_path_; }
  const std::string& record_path() const { return record_path_; }
  size_t client_count() const { return clients_.size(); }
  size_t pending_requests() const { return pending_.size(); }
  nlohmann::ordered_json info() const;

 private:
  struct Client {
    uint64_t id = 0;
    int fd = -1;
    bool tcp = false;
    bool authed = false;
    bool closing = false;      // close once `out` is flushed
    bool want_write = false;   // EPOLLOUT armed
    std::string in;
    size_t scanned = 0;        // bytes of `in` known to hold no newline
    std::string out;
    size_t out_off = 0;
  };
  struct Pending {
    uint64_t client;
    nlohmann::json id;
  };

  void listen_unix();
  void listen_tcp();
  void setup_token();
  void write_record();
  void accept_clients(int listen_fd, bool tcp);
  void on_client_event(uint64_t id, uint32_t events);
  bool read_client(Client& c);   // false: the client is gone
  void handle_line(Client& c, std::string_view line);
  void send(Client& c, const nlohmann::ordered_json& msg);
  void send_error(Client& c, const nlohmann::json& id, const std::string& error);
  void flush(Client& c);
  void begin_close(Client& c);
  void close_client(uint64_t id, bool notify);
  void close_later(uint64_t id);

  EventLoop& loop_;
  Options opts_;
  RequestFn on_request_;
  DisconnectFn on_disconnect_;
  bool started_ = false;
  int unix_fd_ = -1;
  int tcp_fd_ = -1;
  int tcp_port_ = 0;
  std::string socket_path_;
  ino_t socket_ino_ = 0;      // unlink only the socket we created
  std::string token_;
  std::string token_path_;
  std::string record_path_;
  std::string started_at_;
  std::string cwd_;
  uint64_t next_client_ = 1;
  uint64_t next_request_ = 1;
  std::unordered_map<uint64_t, std::unique_ptr<Client>> clients_;
  std::unordered_map<uint64_t, Pending> pending_;
  std::shared_ptr<ControlServer*> self_;  // lets posted callbacks outlive us safely
};

}  // namespace rl
