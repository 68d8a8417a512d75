// Prefill/decode disaggregation, the prefill's half (engine/pd_bridge.hpp): a room
// waits for its K/V (the engine's export) and its decode's registration, then the
// rows go out by token range, in a /dev/shm file or in the HTTP body.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/event_loop.hpp"
#include "base/json_input.hpp"
#include "base/log_text.hpp"
#include "engine/pd_rooms.hpp"
#include "net/http_client.hpp"
#include "net/http_parser.hpp"

namespace rl::engine {

using nlohmann::json;

namespace {

json layout_json(const pd::KvLayout& l) {
  return {{"layers", l.layers}, {"kv_heads", l.kv_heads}, {"head_dim", l.head_dim}, {"elem_size", l.elem_size},
          {"dtype", l.dtype}};
}

// The push's body: 8 bytes (little-endian header length), the JSON header, the rows.
std::string frame(const json& header, const char* rows, size_t n) {
  const std::string h = header.dump();
  std::string body(8, '\0');
  uint64_t len = h.size();
  for (int i = 0; i < 8; ++i) body[static_cast<size_t>(i)] = static_cast<char>((len >> (8 * i)) & 0xff);
  body.reserve(8 + h.size() + n);
  body += h;
  body.append(rows, n);
  return body;
}

// The fault injector for tests (RLHOST_PD_FAULT=corrupt): one byte of the rows
// changes after the prefill's checksum, as a bad link would change it.
bool corrupt_fault() {
  const char* f = std::getenv("RLHOST_PD_FAULT");
  return f && std::string(f) == "corrupt";
}

}  // namespace

// A room lives until its K/V went out, or transfer_timeout_s after its last news.
void PdBridge::sweep_prefill(uint64_t room) {
  auto it = prooms_.find(room);
  if (it == prooms_.end()) return;
  auto& p = it->second;
  if (p->timer) loop_.cancel_timer(p->timer);
  p->timer = loop_.call_later(opts_.transfer_timeout_s, [this, room] {
    auto it2 = prooms_.find(room);
    if (it2 == prooms_.end()) return;
    auto p2 = it2->second;
    if (p2->exp && !p2->registered) {
      --bootstrap_queue_;
      log::warn("engine server: prefill room " + std::to_string(room) + ": no decode registered within " +
                std::to_string(opts_.transfer_timeout_s) + " s; its K/V are dropped");
    }
    prooms_.erase(it2);
  });
}

void PdBridge::export_ready(uint64_t room, std::shared_ptr<pd::Export> e) {
  auto& p = prooms_[room];
  if (!p) p = std::make_shared<PRoom>();
  p->exp = std::move(e);
  p->t_ready = pd_mono_now();
  if (p->registered) push(room);
  else {
    ++bootstrap_queue_;
    sweep_prefill(room);
  }
}

PdReply PdBridge::on_register(const net::ServerRequest& req) {
  PdReply r;
  json b;
  try {
    b = json_input::parse(req.body, "request body");
  } catch (const std::exception& e) {
    return {400, {{"error", e.what()}}};
  }
  if (!b.contains("room") || !b["room"].is_number_integer() || !b.contains("decode_url") || !b["decode_url"].is_string())
    return {400, {{"error", "room (integer) and decode_url (string) are required"}}};
  const uint64_t room = b["room"].get<uint64_t>();
  const std::string backend = b.value("backend", std::string("tcp"));
  if (backend != "shm" && backend != "tcp") return {400, {{"error", "backend: '" + backend + "' is not shm or tcp"}}};
  auto& p = prooms_[room];
  if (!p) {
    p = std::make_shared<PRoom>();
    p->t_created = pd_mono_now();
  }
  if (p->registered) return {409, {{"error", "room " + std::to_string(room) + " already has a decode"}}};
  p->registered = true;
  p->from = std::max<int64_t>(0, b.value("from", int64_t{0}));
  p->decode_url = b["decode_url"].get<std::string>();
  p->backend = backend;
  p->checksum = b.value("checksum", false) || opts_.kv_checksum;
  if (p->exp && !p->exp->ok) {
    std::string why = p->exp->error;
    --bootstrap_queue_;
    prooms_.erase(room);
    return {409, {{"error", "the prefill failed: " + why}}};
  }
  if (p->exp) {
    --bootstrap_queue_;
    push(room);
  } else {
    sweep_prefill(room);
  }
  r.body = {{"room", room}, {"bootstrap", "registered"}};
  return r;
}

void PdBridge::push(uint64_t room) {
  if (!http_) return;  // stopped
  auto it = prooms_.find(room);
  if (it == prooms_.end() || it->second->pushing) return;
  std::shared_ptr<PRoom> p = it->second;
  p->pushing = true;
  if (p->timer) loop_.cancel_timer(p->timer);
  prooms_.erase(it);  // the room is spent: a repeated registration finds nothing
  const pd::Export& e = *p->exp;
  json h;
  h["room"] = room;
  std::string rows;
  std::string shm_path;
  if (!e.ok) {
    h["error"] = "the prefill failed: " + e.error;
  } else {
    const int64_t from = std::min(p->from, e.prompt_len);
    const int64_t n = e.prompt_len - from;
    const char* data = e.kv.data() + e.layout.bytes(from);
    const size_t bytes = static_cast<size_t>(e.layout.bytes(n));
    h["from"] = from;
    h["tokens"] = n;
    h["layout"] = layout_json(e.layout);
    h["first"] = {{"sampled", e.first.sampled}, {"id", e.first.id}, {"logprob", e.first.logprob},
                  {"top", e.first.top}, {"rng_state", e.first.rng_state}};
    h["weight_version"] = e.weight_version;
    h["weights_digest"] = e.weights_digest;
    h["cached_tokens"] = e.cached_tokens;
    const double t_push = pd_mono_now();
    h["meta"] = {{"pd_prefill_alloc_wait_duration", e.queue_time},
                 {"pd_prefill_forward_duration", e.forward_time},
                 {"pd_prefill_transfer_queue_duration", std::max(0.0, t_push - p->t_ready)}};
    if (p->checksum) h["checksum"] = std::to_string(pd::checksum(data, bytes));
    std::string payload(data, bytes);
    if (corrupt_fault() && !payload.empty()) payload[payload.size() / 2] ^= 0x5a;
    h["t_sent"] = pd_unix_now();
    if (p->backend == "shm") {
      shm_path = "/dev/shm/rlhost-pd-" + std::to_string(::getpid()) + "-" + std::to_string(room) + "-" + std::to_string(++shm_seq_);
      const int fd = ::open(shm_path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
      bool ok = fd >= 0;
      size_t off = 0;
      while (ok && off < payload.size()) {
        ssize_t w = ::write(fd, payload.data() + off, payload.size() - off);
        if (w <= 0) ok = false;
        else off += static_cast<size_t>(w);
      }
      if (fd >= 0) ::close(fd);
      if (!ok) {
        ::unlink(shm_path.c_str());
        h = json{{"room", room}, {"error", "the prefill could not write its K/V to " + shm_path + ": " + std::strerror(errno)}};
        shm_path.clear();
      } else {
        h["shm_path"] = shm_path;
      }
    } else {
      rows = std::move(payload);
    }
  }
  net::HttpRequest rq;
  rq.method = "POST";
  rq.url = p->decode_url + "/disagg/kv";
  rq.headers = {{"Content-Type", "application/octet-stream"}};
  if (!opts_.admin_token.empty()) rq.headers.emplace_back("Authorization", "Bearer " + opts_.admin_token);
  rq.body = frame(h, rows.data(), rows.size());
  rq.fresh_connection = true;
  rows.clear();
  ++inflight_queue_;
  http_->submit(std::move(rq), [this, room, shm_path](net::HttpResult&& res) {
    --inflight_queue_;
    if (!shm_path.empty()) ::unlink(shm_path.c_str());  // read and removed by the decode, unless it failed
    if (!res.ok)
      log::warn("engine server: prefill room " + std::to_string(room) + ": pushing K/V failed: " + res.error);
    else if (res.response.status != 200)
      log::warn("engine server: prefill room " + std::to_string(room) + ": the decode answered " +
                std::to_string(res.response.status) + ": " + json_input::excerpt(res.response.body, 300));
  });
}

}  // namespace rl::engine
