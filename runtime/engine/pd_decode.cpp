// Prefill/decode disaggregation, the decode's half (engine/pd_bridge.hpp): once the
// engine reserved blocks for a room's prompt, register with the prefill's bootstrap
// server, then take the K/V it pushes (checked) to the engine; every wait is bounded.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/event_loop.hpp"
#include "base/json_input.hpp"
#include "engine/pd_rooms.hpp"
#include "net/http_client.hpp"
#include "net/http_parser.hpp"

namespace rl::engine {

using nlohmann::json;

namespace {

pd::KvLayout layout_of(const json& j) {
  pd::KvLayout l;
  l.layers = j.at("layers").get<int64_t>();
  l.kv_heads = j.at("kv_heads").get<int64_t>();
  l.head_dim = j.at("head_dim").get<int64_t>();
  l.elem_size = j.at("elem_size").get<int64_t>();
  l.dtype = j.at("dtype").get<std::string>();
  return l;
}

// A K/V file in /dev/shm (backend shm), mapped read-only; removed once read.
std::shared_ptr<void> map_rows(const std::string& path, size_t bytes, std::string& error) {
  if (path.rfind("/dev/shm/rlhost-pd-", 0) != 0 || path.find("..") != std::string::npos) {
    error = "shm_path '" + json_input::excerpt(path, 80) + "' is not an rlhost K/V file";
    return nullptr;
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    error = "opening " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  ::unlink(path.c_str());
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_uid != ::geteuid() || static_cast<size_t>(st.st_size) != bytes) {
    error = path + ": " + std::to_string(st.st_size) + " bytes (or another owner), expected " + std::to_string(bytes);
    ::close(fd);
    return nullptr;
  }
  void* p = bytes ? ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0) : nullptr;
  ::close(fd);
  if (p == MAP_FAILED) {
    error = "mapping " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  return std::shared_ptr<void>(p, [bytes](void* q) {
    if (q) ::munmap(q, bytes);
  });
}

}  // namespace

void PdBridge::reserved(uint64_t room, int64_t from) {
  auto it = drooms_.find(room);
  if (it == drooms_.end()) return;
  it->second->state = "bootstrap";
  it->second->from = from;
  it->second->t_reserved = pd_mono_now();
  register_with_prefill(room, 0);
}

void PdBridge::register_with_prefill(uint64_t room, int attempt) {
  if (!http_) return;  // stopped
  auto it = drooms_.find(room);
  if (it == drooms_.end()) return;
  std::shared_ptr<DRoom> d = it->second;
  net::HttpRequest rq;
  rq.method = "POST";
  const std::string where = d->host + ":" + std::to_string(d->port);
  rq.url = "http://" + (d->host.find(':') != std::string::npos ? "[" + d->host + "]" : d->host) + ":" +
           std::to_string(d->port) + "/disagg/register";
  rq.headers = {{"Content-Type", "application/json"}};
  if (!opts_.admin_token.empty()) rq.headers.emplace_back("Authorization", "Bearer " + opts_.admin_token);
  rq.body = json{{"room", room}, {"from", d->from}, {"decode_url", opts_.advertise_url}, {"backend", d->backend},
                 {"checksum", opts_.kv_checksum}}.dump();
  rq.fresh_connection = true;
  d->request = http_->submit(std::move(rq), [this, room, attempt, where](net::HttpResult&& res) {
    auto it2 = drooms_.find(room);
    if (it2 == drooms_.end()) return;
    auto d2 = it2->second;
    d2->request = 0;
    if (!res.ok && !res.sent && attempt < 4) {
      // Not reached (refused, no route): the prefill may be starting; a few tries, then an error.
      loop_.call_later(0.1 * (attempt + 1), [this, room, attempt] { register_with_prefill(room, attempt + 1); });
      return;
    }
    if (!res.ok) return fail_decode(room, "the prefill's bootstrap server at " + where + " is unreachable: " + res.error);
    if (res.response.status != 200) {
      std::string msg = json_input::excerpt(res.response.body, 300);
      try {
        msg = json::parse(res.response.body).at("error").get<std::string>();
      } catch (...) {
      }
      return fail_decode(room, "the prefill at " + where + " refused room " + std::to_string(room) + ": " + msg);
    }
    d2->state = "transfer";
    d2->t_registered = pd_mono_now();
  });
}

void PdBridge::fail_decode(uint64_t room, const std::string& why) {
  auto it = drooms_.find(room);
  if (it == drooms_.end()) return;
  auto d = it->second;
  if (d->timer) loop_.cancel_timer(d->timer);
  if (d->request && http_) http_->cancel(d->request);
  drooms_.erase(it);
  auto kv = std::make_shared<pd::Delivery>();
  kv->error = "prefill/decode: " + why;
  engine_.deliver_kv(d->rid, kv);
}

void PdBridge::expire_decode(uint64_t room) {
  auto it = drooms_.find(room);
  if (it == drooms_.end()) return;
  auto d = it->second;
  d->timer = 0;
  const std::string s = std::to_string(opts_.transfer_timeout_s) + " s";
  const std::string where = d->host + ":" + std::to_string(d->port);
  if (d->state == "prealloc")
    return fail_decode(room, "no KV blocks for the prompt within " + s +
                                 " (the decode's KV cache is full, or released: raise --kv-cache-tokens or lower --max-running-requests)");
  if (d->state == "bootstrap") return fail_decode(room, "the prefill's bootstrap server at " + where + " did not answer within " + s);
  fail_decode(room, "no K/V from the prefill at " + where + " within " + s + " of registering room " + std::to_string(room));
}

PdReply PdBridge::on_kv(const net::ServerRequest& req) {
  const std::string& body = req.body;
  if (body.size() < 8) return {400, {{"error", "body: expected an 8-byte header length, a JSON header and K/V rows"}}};
  uint64_t hlen = 0;
  for (int i = 0; i < 8; ++i) hlen |= uint64_t{static_cast<unsigned char>(body[static_cast<size_t>(i)])} << (8 * i);
  if (hlen > body.size() - 8) return {400, {{"error", "body: the header length runs past the body"}}};
  json h;
  try {
    h = json_input::parse(std::string_view(body).substr(8, hlen), "K/V header");
  } catch (const std::exception& e) {
    return {400, {{"error", e.what()}}};
  }
  if (!h.contains("room") || !h["room"].is_number_integer()) return {400, {{"error", "K/V header: room is required"}}};
  const uint64_t room = h["room"].get<uint64_t>();
  auto it = drooms_.find(room);
  if (it == drooms_.end())
    return {404, {{"error", "no decode request waits for room " + std::to_string(room) + " (aborted, timed out or done)"}}};
  auto d = it->second;
  if (h.contains("error")) {
    fail_decode(room, h["error"].get<std::string>());
    return {200, {{"room", room}}};
  }
  auto kv = std::make_shared<pd::Delivery>();
  size_t bytes = 0;
  try {
    kv->layout = layout_of(h.at("layout"));
    kv->from = h.at("from").get<int64_t>();
    kv->tokens = h.at("tokens").get<int64_t>();
    if (kv->from < 0 || kv->tokens < 0 || kv->layout.token_bytes() <= 0) throw std::runtime_error("bad token range or layout");
    bytes = static_cast<size_t>(kv->layout.bytes(kv->tokens));
    const json& f = h.at("first");
    kv->first.sampled = f.at("sampled").get<bool>();
    kv->first.id = f.at("id").get<int32_t>();
    kv->first.logprob = f.at("logprob").get<float>();
    kv->first.top = f.at("top").get<std::vector<std::pair<int32_t, float>>>();
    kv->first.rng_state = f.at("rng_state").get<std::string>();
    kv->weight_version = h.at("weight_version").get<std::string>();
    kv->weights_digest = h.at("weights_digest").get<std::string>();
    kv->cached_tokens = h.at("cached_tokens").get<int64_t>();
    for (auto& [k, v] : h.at("meta").items())
      if (k.rfind("pd_prefill_", 0) == 0 && v.is_number()) kv->meta.emplace_back(k, v.get<double>());
  } catch (const std::exception& e) {
    fail_decode(room, std::string("a malformed K/V header from the prefill: ") + e.what());
    return {400, {{"error", std::string("K/V header: ") + e.what()}}};
  }
  if (h.contains("shm_path")) {
    std::string err;
    kv->keep = map_rows(h["shm_path"].get<std::string>(), bytes, err);
    if (!kv->keep && bytes) {
      fail_decode(room, "reading the K/V file failed: " + err);
      return {400, {{"error", err}}};
    }
    kv->data = static_cast<const char*>(kv->keep.get());
  } else {
    if (body.size() - 8 - hlen != bytes) {
      const std::string why = "the K/V rows are " + std::to_string(body.size() - 8 - hlen) + " bytes, the header says " +
                              std::to_string(bytes);
      fail_decode(room, why);
      return {400, {{"error", why}}};
    }
    auto owned = std::make_shared<std::string>(body.substr(8 + hlen));
    kv->data = owned->data();
    kv->keep = owned;
  }
  if (h.contains("checksum")) {
    const std::string want = h["checksum"].get<std::string>();
    const std::string got = std::to_string(pd::checksum(kv->data, bytes));
    if (want != got) {
      const std::string why = "the K/V of room " + std::to_string(room) + " changed in transit (checksum " + got +
                              ", the prefill's " + want + ")";
      fail_decode(room, why);
      return {422, {{"error", why}}};
    }
  }
  const double now = pd_mono_now();
  const double latency = h.contains("t_sent") ? std::max(1e-9, pd_unix_now() - h["t_sent"].get<double>()) : 0;
  kv->meta.emplace_back("pd_decode_bootstrap_duration", std::max(0.0, d->t_registered - d->t_reserved));
  kv->meta.emplace_back("pd_transfer_total_mb", static_cast<double>(bytes) / 1e6);
  if (latency > 0) kv->meta.emplace_back("pd_transfer_speed_gb_s", static_cast<double>(bytes) / 1e9 / latency);
  (void)now;
  if (d->timer) loop_.cancel_timer(d->timer);
  drooms_.erase(it);
  if (!engine_.deliver_kv(d->rid, kv))
    return {404, {{"error", "the decode request of room " + std::to_string(room) + " has ended"}}};
  if (on_transfer) on_transfer(TransferStat{static_cast<double>(bytes), latency});
  return {200, {{"room", room}, {"bytes", bytes}}};
}

}  // namespace rl::engine
