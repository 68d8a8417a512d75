// Prefill/decode disaggregation between two engine servers (engine/pd_bridge.hpp has
// the protocol): options, the bootstrap server, and which requests belong to a room.
// The prefill's half is pd_prefill.cpp, the decode's pd_decode.cpp.
#include "engine/pd_bridge.hpp"

#include <cstdio>
#include <random>

#include "base/event_loop.hpp"
#include "base/log_text.hpp"
#include "engine/pd_rooms.hpp"
#include "net/event_server.hpp"
#include "net/http_client.hpp"
#include "net/http_server.hpp"

namespace rl::engine {

using nlohmann::json;

namespace {
bool is_loopback_host(const std::string& h) { return net::HttpServer::is_loopback(h); }
}  // namespace

PdBridge::PdBridge(Engine& engine, EventLoop& loop, PdOptions opts, Post post)
    : engine_(engine), loop_(loop), opts_(std::move(opts)), post_(std::move(post)) {
  if (opts_.mode != "null" && opts_.mode != "prefill" && opts_.mode != "decode")
    throw Error("disaggregation_mode: '" + opts_.mode + "' is not a mode", "use null, prefill or decode");
  if (opts_.transfer_backend != "auto" && opts_.transfer_backend != "shm" && opts_.transfer_backend != "tcp")
    throw Error("disaggregation_transfer_backend: '" + opts_.transfer_backend + "' is not a backend",
                "use auto (shm on one host, tcp between hosts), shm or tcp");
  if (!(opts_.transfer_timeout_s > 0))
    throw Error("disaggregation_transfer_timeout: must be > 0 seconds");
  net::HttpClient::Options ho;
  ho.timeout_s = opts_.transfer_timeout_s;
  ho.connect_timeout_s = std::min(5.0, opts_.transfer_timeout_s);
  http_ = std::make_unique<net::HttpClient>(loop_, ho);
}

PdBridge::~PdBridge() = default;

void PdBridge::start_bootstrap(std::function<void(net::ServerRequest&, std::shared_ptr<net::Responder>)> handle) {
  net::EventServer::Options so;
  so.host = opts_.bootstrap_host;
  so.port = opts_.bootstrap_port;
  so.allow_remote = !is_loopback_host(opts_.bootstrap_host);
  so.name = "prefill bootstrap server";
  so.limits.max_body_bytes = 1 << 20;
  bootstrap_ = std::make_unique<net::EventServer>(loop_, so, std::move(handle));
  try {
    bootstrap_->start();
  } catch (const std::exception& e) {
    throw Error(std::string("disaggregation_bootstrap_port: ") + e.what(), "pick another port, or 0 for a free one");
  }
  log::info("engine server: prefill bootstrap server on " + bootstrap_->url());
}

int PdBridge::bootstrap_port() const { return bootstrap_ ? bootstrap_->port() : 0; }

void PdBridge::stop() {
  if (bootstrap_) bootstrap_->stop();
  for (auto& [room, p] : prooms_)
    if (p->timer) loop_.cancel_timer(p->timer);
  for (auto& [room, d] : drooms_)
    if (d->timer) loop_.cancel_timer(d->timer);
  prooms_.clear();
  drooms_.clear();
  http_.reset();
}

void PdBridge::attach(const json& body, GenerateCall& call) {
  const json* room = body.contains("bootstrap_room") && !body["bootstrap_room"].is_null() ? &body["bootstrap_room"] : nullptr;
  if (!room) return;  // a plain request: served as on a unified engine
  if (opts_.mode == "null")
    throw BadRequest("bootstrap_room: this engine is not a prefill or decode engine",
                     "start it with --disaggregation-mode prefill|decode, or send the request without bootstrap_*");
  const size_t n = call.requests.size();
  // One value for every sequence, or a list with one per sequence (rooms must be a list then).
  auto item = [&](const char* field, size_t i) -> const json& {
    const json& v = body.at(field);
    if (!v.is_array()) return v;
    if (v.size() != n)
      throw BadRequest(std::string(field) + ": " + std::to_string(v.size()) + " values for " + std::to_string(n) +
                           " sequences", "one per sequence (n = 1 per prompt)");
    return v[i];
  };
  for (const char* f : {"bootstrap_host", "bootstrap_port"})
    if (decode() && (!body.contains(f) || body[f].is_null()))
      throw BadRequest(std::string(f) + ": missing (a decode engine needs the prefill's bootstrap address)",
                       "route through a PD router, which adds bootstrap_host, bootstrap_port and bootstrap_room");
  if (n > 1 && !room->is_array())
    throw BadRequest("bootstrap_room: one room for " + std::to_string(n) + " sequences (n > 1 or a batch)",
                     "each sequence needs a room of its own: send a list, one per prompt, with n = 1");
  for (size_t i = 0; i < n; ++i) {
    const json& r = item("bootstrap_room", i);
    if (!r.is_number_unsigned() && !(r.is_number_integer() && r.get<int64_t>() >= 0))
      throw BadRequest("bootstrap_room: expected a non-negative integer");
    const uint64_t id = r.get<uint64_t>();
    GenerateRequest& q = call.requests[i];
    if (q.rid.empty()) {  // the room's request, by id (the engine would name it later)
      static thread_local std::mt19937_64 rng{std::random_device{}()};
      char buf[40];
      std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(rng()),
                    static_cast<unsigned long long>(rng()));
      q.rid = buf;
    }
    if (prefill()) {
      if (prooms_.count(id) && prooms_[id]->exp)
        throw BadRequest("bootstrap_room: room " + std::to_string(id) + " is in use", "a fresh random room per request");
      auto& p = prooms_[id];
      if (!p) {
        p = std::make_shared<PRoom>();
        p->t_created = pd_mono_now();
      }
      q.params.max_new_tokens = std::min<int64_t>(q.params.max_new_tokens, 1);  // the decode samples the rest
      q.pd_export = std::make_shared<pd::Export>();
      q.pd_export->on_ready = [this, id](const std::shared_ptr<pd::Export>& e) {
        post_([this, id, e] { export_ready(id, e); });
      };
      sweep_prefill(id);
    } else {
      const json& host = item("bootstrap_host", i);
      const json& port = item("bootstrap_port", i);
      if (!host.is_string() || host.get<std::string>().empty()) throw BadRequest("bootstrap_host: expected a host name or address");
      if (!port.is_number_integer() || port.get<int64_t>() < 1 || port.get<int64_t>() > 65535)
        throw BadRequest("bootstrap_port: expected a port in [1, 65535]");
      if (drooms_.count(id)) throw BadRequest("bootstrap_room: room " + std::to_string(id) + " is in use");
      auto d = std::make_shared<DRoom>();
      d->host = host.get<std::string>();
      d->port = static_cast<int>(port.get<int64_t>());
      d->backend = opts_.transfer_backend != "auto" ? opts_.transfer_backend : is_loopback_host(d->host) ? "shm" : "tcp";
      d->rid = q.rid;
      drooms_[id] = d;
      d->timer = loop_.call_later(opts_.transfer_timeout_s, [this, id] { expire_decode(id); });
      q.pd_import = std::make_shared<pd::Import>();
      q.pd_import->on_reserved = [this, id](int64_t from) { post_([this, id, from] { reserved(id, from); }); };
    }
  }
}

}  // namespace rl::engine
