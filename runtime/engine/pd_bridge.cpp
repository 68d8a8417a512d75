// Prefill/decode disaggregation between two engine servers: rooms, the bootstrap
// handshake and the K/V transfer (engine/pd_bridge.hpp has the protocol).
#include "engine/pd_bridge.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>

#include "base/event_loop.hpp"
#include "base/json_input.hpp"
#include "base/log_text.hpp"
#include "net/event_server.hpp"
#include "net/http_client.hpp"
#include "net/http_server.hpp"

namespace rl::engine {

using nlohmann::json;

namespace {

double mono_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

json layout_json(const pd::KvLayout& l) {
  return {{"layers", l.layers}, {"kv_heads", l.kv_heads}, {"head_dim", l.head_dim}, {"elem_size", l.elem_size},
          {"dtype", l.dtype}};
}
pd::KvLayout layout_of(const json& j) {
  pd::KvLayout l;
  l.layers = j.at("layers").get<int64_t>();
  l.kv_heads = j.at("kv_heads").get<int64_t>();
  l.head_dim = j.at("head_dim").get<int64_t>();
  l.elem_size = j.at("elem_size").get<int64_t>();
  l.dtype = j.at("dtype").get<std::string>();
  return l;
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

bool is_loopback_host(const std::string& h) { return net::HttpServer::is_loopback(h); }

// The fault injector for tests (RLHOST_PD_FAULT=corrupt): one byte of the rows
// changes after the prefill's checksum, as a bad link would change it.
bool corrupt_fault() {
  const char* f = std::getenv("RLHOST_PD_FAULT");
  return f && std::string(f) == "corrupt";
}

}  // namespace

struct PdBridge::PRoom {
  std::shared_ptr<pd::Export> exp;
  bool registered = false, pushing = false;
  int64_t from = 0;
  std::string decode_url, backend;
  bool checksum = false;
  double t_created = 0, t_ready = 0;
  uint64_t timer = 0;
};

struct PdBridge::DRoom {
  std::string rid, host;
  int port = 0;
  std::string backend;
  std::string state = "prealloc";  // prealloc -> bootstrap -> transfer
  int64_t from = 0;
  double t_reserved = 0, t_registered = 0;
  uint64_t timer = 0, request = 0;
};

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

// ---- both: which requests belong to a room ----------------------------------------

void PdBridge::attach(const json& body, GenerateCall& call) {
  const json* room = body.contains("bootstrap_room") && !body["bootstrap_room"].is_null() ? &body["bootstrap_room"] : nullptr;
  if (!room) return;  // a plain request: served as on a unified engine
  if (opts_.mode == "null")
    throw BadRequest("bootstrap_room: this engine is not a prefill or decode engine",
                     "start it with --disaggregation-mode prefill|decode, or send the request without bootstrap_*");
  const size_t n = call.requests.size();
  const size_t per = call.batched && room->is_array() ? std::max<size_t>(1, n / std::max<size_t>(1, room->size())) : n;
  auto item = [&](const char* field, size_t i) -> const json& {
    const json& v = body.at(field);
    if (!v.is_array()) return v;
    const size_t k = i / per;
    if (k >= v.size())
      throw BadRequest(std::string(field) + ": " + std::to_string(v.size()) + " values for " +
                       std::to_string(n / per) + " prompts", "one per prompt");
    return v[k];
  };
  for (const char* f : {"bootstrap_host", "bootstrap_port"})
    if (decode() && (!body.contains(f) || body[f].is_null()))
      throw BadRequest(std::string(f) + ": missing (a decode engine needs the prefill's bootstrap address)",
                       "route through a PD router, which adds bootstrap_host, bootstrap_port and bootstrap_room");
  if (n > 1 && !room->is_array())
    throw BadRequest("bootstrap_room: one room for " + std::to_string(n) + " sequences (n > 1 or a batch)",
                     "each sequence needs a room of its own: send a list, one per prompt, with n = 1");
  if (room->is_array() && room->size() != n)
    throw BadRequest("bootstrap_room: " + std::to_string(room->size()) + " rooms for " + std::to_string(n) + " sequences",
                     "one room per sequence (n = 1 per prompt)");
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
        p->t_created = mono_now();
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

// ---- prefill --------------------------------------------------------------------------

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
  p->t_ready = mono_now();
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
    p->t_created = mono_now();
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
    const double t_push = mono_now();
    h["meta"] = {{"pd_prefill_alloc_wait_duration", e.queue_time},
                 {"pd_prefill_forward_duration", e.forward_time},
                 {"pd_prefill_transfer_queue_duration", std::max(0.0, t_push - p->t_ready)}};
    if (p->checksum) h["checksum"] = std::to_string(pd::checksum(data, bytes));
    std::string payload(data, bytes);
    if (corrupt_fault() && !payload.empty()) payload[payload.size() / 2] ^= 0x5a;
    h["t_sent"] = unix_now();
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

// ---- decode ---------------------------------------------------------------------------

void PdBridge::reserved(uint64_t room, int64_t from) {
  auto it = drooms_.find(room);
  if (it == drooms_.end()) return;
  it->second->state = "bootstrap";
  it->second->from = from;
  it->second->t_reserved = mono_now();
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
    d2->t_registered = mono_now();
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
  const double now = mono_now();
  const double latency = h.contains("t_sent") ? std::max(1e-9, unix_now() - h["t_sent"].get<double>()) : 0;
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
