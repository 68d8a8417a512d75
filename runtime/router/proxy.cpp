// Forwarding one client request to a worker: pick (policy), send (HttpClient,
// keep-alive pool), relay the response as it arrives, retry elsewhere on a
// connect error or 5xx as long as nothing has been relayed yet. A worker that
// dropped the connection after taking the request is not retried elsewhere. A
// worker removed from the router while it holds a request (a stalled engine taken
// out by its owner's health checks) gives it up: sent to another worker, as long as
// nothing has been relayed yet.
//
// Why the relay always uses on_chunk: a streamed (SSE) generation and a plain
// JSON answer look the same to the router until the first bytes arrive, and
// holding a stream until it ends would defeat streaming. A plain answer that
// arrives whole in its first chunk (the usual case) still goes out as one
// write with a Content-Length.
#include <algorithm>
#include <cmath>
#include <cstring>

#include <spdlog/spdlog.h>
#include "base/json_input.hpp"
#include "router/router_impl.hpp"

namespace rl::router {

using nlohmann::json;

bool hop_by_hop(std::string_view name) {  // lowercase names
  return name == "connection" || name == "keep-alive" || name == "proxy-connection" || name == "transfer-encoding" ||
         name == "te" || name == "trailer" || name == "upgrade" || name == "content-length" || name == "host" ||
         name == "expect";
}

ForwardHeaders forward_headers(const net::ServerRequest& req) {
  ForwardHeaders f;
  for (auto& [k, v] : req.headers) {
    if (hop_by_hop(k)) continue;
    if (k == "content-type") f.has_type = true;
    if (k == "x-smg-routing-key" || (k == "x-session-id" && f.key.empty())) f.key = v;
    f.headers.emplace_back(k, v);
  }
  return f;
}

namespace {

void pack_ids(const json& ids, std::string& out) {
  for (auto& v : ids) {
    if (!v.is_number_integer()) continue;
    const int64_t id = v.get<int64_t>();
    char b[4] = {static_cast<char>(id >> 24), static_cast<char>(id >> 16), static_cast<char>(id >> 8), static_cast<char>(id)};
    out.append(b, 4);
  }
}

void append_text(const json& v, std::string& out) {
  if (v.is_string()) {
    out += v.get_ref<const std::string&>();
  } else if (v.is_array() && !v.empty()) {
    if (v[0].is_number_integer()) pack_ids(v, out);       // token ids
    else append_text(v[0], out);                          // a batch: route by its first prompt
  }
}

}  // namespace

std::string routing_text(const json& j) {
  std::string out;
  if (!j.is_object()) return out;
  if (auto it = j.find("input_ids"); it != j.end()) append_text(*it, out);
  else if (auto t = j.find("text"); t != j.end()) append_text(*t, out);
  else if (auto p = j.find("prompt"); p != j.end()) append_text(*p, out);
  else if (auto m = j.find("messages"); m != j.end() && m->is_array()) {
    for (auto& msg : *m) {
      if (!msg.is_object()) continue;
      if (auto r = msg.find("role"); r != msg.end() && r->is_string()) out += r->get_ref<const std::string&>() + ": ";
      if (auto c = msg.find("content"); c != msg.end()) {
        if (c->is_string()) out += c->get_ref<const std::string&>();
        else if (c->is_array())
          for (auto& part : *c)
            if (part.is_object() && part.contains("text") && part["text"].is_string()) out += part["text"].get<std::string>();
      }
      out += '\n';
    }
  }
  return out;
}

namespace {
// Throws json_input::Error for a non-JSON or over-limit body.
std::string routing_text_of(const std::string& body) { return routing_text(json_input::parse(body, "request body")); }
}  // namespace

// One client request across its attempts.
struct Exchange : std::enable_shared_from_this<Exchange> {
  Router::Impl* r = nullptr;
  Res res;
  std::string method, target, endpoint, body;
  net::HeaderList headers;  // forwarded to the worker
  std::string text, key;    // routing text and key
  double started = 0;
  int attempt = 0;
  std::vector<uint64_t> tried;
  uint64_t worker = 0;      // current attempt's worker id (0 = none in flight)
  std::string worker_url;
  uint64_t transfer = 0;
  bool pooled = false;      // transfer is the UpstreamPool's (http://), else HttpClient's
  uint64_t backoff_timer = 0;
  bool relaying = false;    // bytes went to the client: no more retries
  bool finished = false;
  double last_bytes = 0;    // when the worker last sent bytes
  bool orphaned = false;    // streaming from a worker the router removed
  std::string held;         // body of a 5xx we may retry
  std::string last_error;
  int last_status = 0;

  void dispatch();
  void on_chunk(std::string_view bytes);
  void on_done(net::HttpResult&& result);
  bool can_retry() const {
    return !relaying && attempt < r->opts.max_retries && EventLoop::now() - started < r->opts.request_timeout_s;
  }
  void retry();
  void release_worker();
  // A 5xx from the current worker: counted, and kept as what a final failure reports.
  void note_5xx(long status, const std::string& detail = {});
  void begin_relay(long status, const net::HeaderList& upstream, std::string_view first);
  void fail(int status, const std::string& type, const std::string& message);
  void client_gone();
  void worker_removed();
  void watch_orphaned_stream();
  void drop_transfer() {  // the worker's transfer, cancelled (no callback follows)
    if (transfer) pooled ? r->upstream->cancel(transfer) : r->client->cancel(transfer);
    transfer = 0;
  }
};

// A response still streaming from a worker the router removed is read to its end
// while the worker keeps sending (removed to scale down); one that sends nothing for
// this long (stopped, cut off) is cut, so the client learns at once, not at the
// request timeout.
constexpr double kOrphanedStreamQuietS = 5.0;
// The most of a 5xx body held while the request may still go to another worker.
constexpr size_t kHeldErrorBodyBytes = size_t{1} << 20;

void Exchange::note_5xx(long status, const std::string& detail) {
  last_error = "HTTP " + std::to_string(status) + " from " + worker_url + detail;
  last_status = static_cast<int>(status);
  r->metrics.record_upstream_error(worker_url, "http_5xx");
}

void Exchange::release_worker() {
  if (!worker) return;
  if (Worker* w = r->registry.by_id(worker)) r->registry.on_released(*w);
  worker = 0;
}

void Exchange::fail(int status, const std::string& type, const std::string& message) {
  finished = true;
  r->metrics.record_request(worker_url.empty() ? "none" : worker_url, endpoint, status, EventLoop::now() - started);
  if (res->alive() && !res->started()) r->send_error(res, status, type, message);
  else res->abort();
}

void Exchange::dispatch() {
  const double now = EventLoop::now();
  std::vector<Worker*> cands = r->registry.available(now, tried);
  // Every available worker already tried: a second go on one beats giving up.
  if (cands.empty() && !tried.empty()) cands = r->registry.available(now);
  if (cands.empty()) {
    if (!last_error.empty()) {
      r->metrics.record_rejected("no_worker");
      return fail(last_status >= 500 ? 502 : 503, "service_unavailable",
                  "no worker could take the request after " + std::to_string(attempt + 1) + " attempt(s); last error: " + last_error);
    }
    r->metrics.record_rejected("no_worker");
    return fail(503, "service_unavailable", "no healthy worker: " + r->registry.why_unavailable(now));
  }
  RouteInput in{text, key, now};
  Worker* w = r->policy->pick(cands, in);
  r->registry.on_dispatch(*w);
  worker = w->id;
  worker_url = w->url;
  tried.push_back(w->id);
  auto& live = r->exchanges;
  if (live.size() >= r->exchanges_prune_at) {  // amortised: the ended ones go
    live.erase(std::remove_if(live.begin(), live.end(), [](const std::weak_ptr<Exchange>& e) {
      auto x = e.lock();
      return !x || x->finished;
    }), live.end());
    r->exchanges_prune_at = std::max<size_t>(64, 2 * live.size());
  }
  live.push_back(weak_from_this());

  net::HttpRequest hr;
  hr.method = method;
  hr.url = w->url + target;
  hr.headers = headers;
  hr.body = body;  // a copy: a retry needs it again
  hr.timeout_s = std::max(0.001, r->opts.request_timeout_s - (now - started));
  auto self = shared_from_this();
  auto done = [self](net::HttpResult&& result) { self->on_done(std::move(result)); };
  auto chunk = [self](std::string_view bytes) { self->on_chunk(bytes); };
  pooled = w->url.rfind("http://", 0) == 0;
  transfer = pooled ? r->upstream->submit(std::move(hr), std::move(done), std::move(chunk))
                    : r->client->submit(std::move(hr), std::move(done), std::move(chunk));
}

void Exchange::begin_relay(long status, const net::HeaderList& upstream, std::string_view first) {
  relaying = true;
  net::ResponseHeaders hs;
  std::optional<size_t> length;
  for (auto& [k, v] : upstream) {
    if (k == "content-length") {
      char* end = nullptr;
      const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
      if (end && *end == 0) length = n;
      continue;
    }
    if (hop_by_hop(k)) continue;
    hs.emplace_back(k, v);
  }
  hs.emplace_back("x-rlhost-worker", worker_url);
  // Retried on another worker: the client may count the attempts (a sample's trace does).
  if (attempt > 0) hs.emplace_back("x-rlhost-attempts", std::to_string(attempt + 1));
  const int st = static_cast<int>(status ? status : 200);
  if (length && *length == first.size()) {  // whole body at once: one write
    res->send(st, hs, first);
    return;
  }
  res->start(st, hs, length);
  res->write(first);
}

void Exchange::on_chunk(std::string_view bytes) {
  if (finished) return;
  if (orphaned) last_bytes = EventLoop::now();
  if (!relaying) {
    const net::HttpResponse* up = pooled ? r->upstream->peek(transfer) : r->client->peek(transfer);
    const long status = up ? up->status : 200;
    if (status >= 500 && can_retry()) {  // hold it: we may answer from another worker instead
      if (held.size() + bytes.size() <= kHeldErrorBodyBytes) {
        held.append(bytes);
        return;
      }
      // A failing worker must not grow the router's memory, nor keep the request while
      // it sends: an error body past the cap is cut and the request goes elsewhere.
      drop_transfer();
      note_5xx(status, " with an error body over " + std::to_string(kHeldErrorBodyBytes >> 20) + " MiB (cut)");
      if (Worker* w = r->registry.by_id(worker)) r->registry.on_failure(*w, EventLoop::now(), last_error);
      release_worker();
      return retry();
    }
    begin_relay(status, up ? up->headers : net::HeaderList{}, bytes);
    return;
  }
  res->write(bytes);
  // Back-pressure: a client that reads slower than the worker writes must not
  // make us buffer the whole stream. Stop reading the worker past 1 MiB queued
  // for the client; resume once the client has drained its socket buffer.
  if (pooled && res->buffered() > (1u << 20) && r->upstream->pause(transfer, true)) {
    std::weak_ptr<Exchange> weak = shared_from_this();
    res->on_drain([weak] {
      if (auto e = weak.lock(); e && e->transfer && !e->finished) e->r->upstream->pause(e->transfer, false);
    });
  }
}

void Exchange::retry() {
  r->metrics.record_retry(worker_url);
  attempt++;
  held.clear();
  // Exponential backoff with jitter (0.5x-1.5x), so retries from many requests
  // that failed together do not arrive together.
  double delay = std::min(r->opts.retry_max_backoff_s, r->opts.retry_backoff_s * std::pow(2.0, attempt - 1));
  delay *= std::uniform_real_distribution<double>(0.5, 1.5)(r->rng);
  auto self = shared_from_this();
  backoff_timer = r->loop.call_later(delay, [self] {
    self->backoff_timer = 0;
    if (!self->finished) self->dispatch();
  });
}

void Exchange::on_done(net::HttpResult&& result) {
  transfer = 0;
  Worker* w = r->registry.by_id(worker);
  release_worker();
  if (finished) return;
  const double now = EventLoop::now();
  if (!result.ok) {
    const char* kind = result.timed_out ? "timeout" : "connect";
    last_error = result.error;
    last_status = 0;
    r->metrics.record_upstream_error(worker_url, kind);
    if (w) {
      r->registry.on_failure(*w, now, result.error);
      if (!result.timed_out) w->next_probe_at = 0;  // a refused connection: probe it now
    }
    if (relaying) {  // mid-stream: the client gets a truncated response, never a hang
      finished = true;
      r->metrics.record_request(worker_url, endpoint, 502, now - started);
      res->abort();
      return;
    }
    if (result.timed_out) {
      return fail(504, "timeout", "worker " + worker_url + " did not answer within the request timeout (" +
                                      std::to_string(r->opts.request_timeout_s) + " s): " + result.error);
    }
    // A worker that dropped the connection after taking the request may have been
    // killed by it: another worker would only meet the same end.
    if (result.sent)
      return fail(502, "bad_gateway",
                  "worker " + worker_url + " dropped the connection while handling the request: " + result.error +
                      " (not retried on another worker: the request itself may be what made it drop)");
    if (can_retry()) return retry();
    return fail(502, "bad_gateway", "worker request failed: " + result.error);
  }
  const long status = result.response.status;
  if (w) {
    if (status >= 500) r->registry.on_failure(*w, now, "HTTP " + std::to_string(status) + " from " + worker_url);
    else r->registry.on_success(*w);
  }
  if (!relaying) {
    if (status >= 500) {
      note_5xx(status);
      if (can_retry()) return retry();
    }
    // Nothing relayed yet: an empty body, or a held 5xx we are giving back.
    begin_relay(status, result.response.headers, held);
  }
  finished = true;
  res->end();
  r->metrics.record_request(worker_url, endpoint, static_cast<int>(status), now - started);
}

void Exchange::client_gone() {
  if (finished) return;
  finished = true;
  drop_transfer();
  release_worker();
  if (backoff_timer) r->loop.cancel_timer(backoff_timer);
  backoff_timer = 0;
  r->metrics.record_request(worker_url.empty() ? "none" : worker_url, endpoint, 499, EventLoop::now() - started);
}

// Its worker left the router with the request in flight: the transfer is dropped and
// the request goes to another worker (a retry) unless bytes already went to the client;
// then the stream goes on while the worker sends (watch_orphaned_stream).
void Exchange::worker_removed() {
  if (finished || !transfer) return;
  if (relaying) {
    worker = 0;  // gone from the registry: nothing to release
    orphaned = true;
    last_bytes = EventLoop::now();
    return watch_orphaned_stream();
  }
  drop_transfer();
  worker = 0;  // gone from the registry: nothing to release
  last_error = "worker " + worker_url + " left the router while it held the request";
  last_status = 0;
  r->metrics.record_upstream_error(worker_url, "removed");
  if (can_retry()) return retry();
  fail(502, "bad_gateway", last_error);
}

void Exchange::watch_orphaned_stream() {
  std::weak_ptr<Exchange> weak = shared_from_this();
  const double quiet = EventLoop::now() - last_bytes;
  r->loop.call_later(std::max(0.05, kOrphanedStreamQuietS - quiet), [weak] {
    auto e = weak.lock();
    if (!e || e->finished || !e->transfer) return;
    const double now = EventLoop::now();
    // the client reading slowly (the transfer paused for back-pressure) is no fault of the worker's
    if (e->res->buffered() > 0) e->last_bytes = now;
    if (now - e->last_bytes < kOrphanedStreamQuietS) return e->watch_orphaned_stream();
    spdlog::warn("router: cut a response streaming from removed worker {} after {:.1f} s without a byte", e->worker_url,
                 now - e->last_bytes);
    e->drop_transfer();
    e->finished = true;
    e->r->metrics.record_upstream_error(e->worker_url, "removed");
    e->r->metrics.record_request(e->worker_url, e->endpoint, 502, now - e->started);
    e->res->abort();  // a truncated response, as when a worker drops mid-stream
  });
}

void Router::Impl::redispatch_from(uint64_t id, const std::string& url) {
  std::vector<std::shared_ptr<Exchange>> held;
  for (auto& e : exchanges)
    if (auto x = e.lock(); x && !x->finished && x->worker == id) held.push_back(std::move(x));
  size_t streaming = 0;
  for (auto& x : held) {
    streaming += x->relaying ? 1 : 0;
    x->worker_removed();
  }
  if (held.size() > streaming && running)
    spdlog::info("router: {} request(s) that {} held go to the other workers", held.size() - streaming, url);
  if (streaming && running)
    spdlog::info("router: {} response(s) streaming from {} go on while it sends (cut after {:.0f} s without a byte)",
                 streaming, url, kOrphanedStreamQuietS);
}

void Router::Impl::proxy(net::ServerRequest& req, const Res& res, bool route_on_body) {
  auto ex = std::make_shared<Exchange>();
  ex->r = this;
  ex->res = res;
  ex->started = EventLoop::now();
  ex->method = req.method;
  ex->target = req.target;
  ex->endpoint = req.path;
  ForwardHeaders fwd = forward_headers(req);
  ex->headers = std::move(fwd.headers);
  ex->key = std::move(fwd.key);
  const bool has_type = fwd.has_type;
  // libcurl would label a body without a type as a form; these APIs speak JSON.
  if (!has_type && !req.body.empty()) ex->headers.emplace_back("content-type", "application/json");
  if (route_on_body && policy->needs_text()) {
    try {
      ex->text = routing_text_of(req.body);
    } catch (const json_input::Error& e) {
      metrics.record_rejected("bad_request");
      metrics.record_request("none", req.path, 400, 0);
      send_error(res, 400, "invalid_request_error",
                 req.method + " " + req.path + ": the " + policy->name() +
                     " policy routes on the request text, but the body is not JSON within the limits: " + e.what() +
                     " (send a JSON object with 'text', 'input_ids', 'prompt' or 'messages')");
      return;
    }
  }
  ex->body = std::move(req.body);
  std::weak_ptr<Exchange> weak = ex;
  res->on_close([weak] {
    if (auto e = weak.lock()) e->client_gone();
  });
  ex->dispatch();
}

}  // namespace rl::router
