// Prefill/decode disaggregation, the servers' half (SGLang's protocol): the router
// sends one request to a prefill and a decode engine with the same bootstrap_host,
// bootstrap_port and bootstrap_room. Then:
//
//   decode   reserves KV blocks for the prompt (its prefix cache serves what it can)
//   decode   POST <bootstrap_host>:<bootstrap_port>/disagg/register
//              {room, from, decode_url, backend}: "send me prompt tokens [from, L)"
//   prefill  runs the prompt and its first token; as the request finishes, its K/V
//              and first token are handed over (engine/pd.hpp Export)
//   prefill  POST <decode_url>/disagg/kv: a header (room, token range, layout, the
//              first token and sampler state, weight version, checksum, timings) and
//              the K/V rows: in the body (backend "tcp": HTTP over TCP, between hosts)
//              or in a /dev/shm file the body names (backend "shm": one host)
//   decode   writes the rows into its reserved blocks and decodes on; its answer is
//              the request's (the router joins the prefill's prompt log-probs in front)
//
// Every wait is bounded by transfer_timeout_s and ends the request with an error that
// says which side and what; blocks go back on every path. Runs on the server's event
// loop (HTTP both ways through rl::net); the engine's callbacks post to it.
// LibTorch-free.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "engine/engine.hpp"
#include "engine/generate_api.hpp"

namespace rl {
class EventLoop;
}
namespace rl::net {
class HttpClient;
class EventServer;
struct ServerRequest;
class Responder;
}  // namespace rl::net

namespace rl::engine {

struct PdOptions {
  std::string mode = "null";             // null | prefill | decode (SGLang's --disaggregation-mode)
  std::string bootstrap_host = "127.0.0.1";  // prefill: where the bootstrap server binds
  int bootstrap_port = 0;                // prefill: its port (0: a free one)
  std::string transfer_backend = "auto"; // decode: auto (shm when the prefill is on loopback) | shm | tcp
  double transfer_timeout_s = 60;        // each wait: blocks, bootstrap, K/V
  bool kv_checksum = false;              // both sides checksum the rows
  std::string advertise_url;             // decode: the URL the prefill pushes to (default: the server's)
  std::string admin_token;               // sent with both calls (each side checks it)
};

// What a PD endpoint answers.
struct PdReply {
  int status = 200;
  nlohmann::json body = nlohmann::json::object();
};

class PdBridge {
 public:
  using Post = std::function<bool(std::function<void()>)>;  // runs fn on the server's loop
  using Authorized = std::function<bool(const net::ServerRequest&)>;
  PdBridge(Engine& engine, EventLoop& loop, PdOptions opts, Post post);
  ~PdBridge();

  const PdOptions& options() const { return opts_; }
  bool prefill() const { return opts_.mode == "prefill"; }
  bool decode() const { return opts_.mode == "decode"; }
  // Prefill: starts the bootstrap server (loop thread); `handle` serves its requests.
  void start_bootstrap(std::function<void(net::ServerRequest&, std::shared_ptr<net::Responder>)> handle);
  int bootstrap_port() const;
  void stop();  // loop thread: closes the bootstrap server, drops transfers in flight

  // /generate (and /v1/*) on a PD engine, loop thread: reads bootstrap_host/port/room
  // (lists for a batched call) and ties each request to its room. A request without
  // them is served as on a unified engine. BadRequest naming the field on bad values.
  void attach(const nlohmann::json& body, GenerateCall& call);
  // Loop thread.
  PdReply on_register(const net::ServerRequest& req);  // prefill's bootstrap server
  PdReply on_kv(const net::ServerRequest& req);        // decode

  // For /metrics: prefill rooms waiting for their decode's registration, and pushing.
  int64_t bootstrap_queue() const { return bootstrap_queue_; }
  int64_t inflight_queue() const { return inflight_queue_; }
  struct TransferStat {  // one delivered transfer (decode side)
    double bytes = 0, seconds = 0;
  };
  std::function<void(const TransferStat&)> on_transfer;  // metrics hook, loop thread

 private:
  struct PRoom;
  struct DRoom;
  void export_ready(uint64_t room, std::shared_ptr<pd::Export> e);
  void push(uint64_t room);
  void sweep_prefill(uint64_t room);
  void reserved(uint64_t room, int64_t from);
  void register_with_prefill(uint64_t room, int attempt);
  void fail_decode(uint64_t room, const std::string& why);
  void expire_decode(uint64_t room);

  Engine& engine_;
  EventLoop& loop_;
  PdOptions opts_;
  Post post_;
  std::unique_ptr<net::HttpClient> http_;
  std::unique_ptr<net::EventServer> bootstrap_;
  std::unordered_map<uint64_t, std::shared_ptr<PRoom>> prooms_;
  std::unordered_map<uint64_t, std::shared_ptr<DRoom>> drooms_;
  int64_t bootstrap_queue_ = 0, inflight_queue_ = 0;
  uint64_t shm_seq_ = 0;
};

}  // namespace rl::engine
