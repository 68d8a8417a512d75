// Prefill/decode disaggregation: one generation sent to a prefill and a decode
// worker at once (sglang-router's PD mode, SGLang's wire protocol).
//
// The router picks a prefill worker (prefill policy) and a decode worker (decode
// policy; a routing key hashes to a fixed pair), adds the prefill's bootstrap
// host/port and a random room to the body (pd_body.hpp), and sends the same body
// to both. The decode worker's answer is the client's: whole and merged with the
// prefill's (input log-probs, pd_* timings) when not streaming; relayed as it
// arrives when streaming (the prefill's answer is awaited and dropped).
//
// Failures: either side failing (transport error or a non-2xx answer) fails the
// request with that side's error, named; when both failed, the prefill's (a decode
// that failed first waits up to a second for the prefill's answer). Once
// both were sent the room is spent, so nothing is retried; a connection refused
// before a side was sent picks a new pair (and a new room), the other side's
// transfer cancelled. A timeout or 5xx on a PD request does not count toward the
// circuit breaker (a KV transfer that timed out says as little about one side as
// about the other); connection errors do. A side's worker removed from the router
// while it holds the request (a stalled engine taken out by its owner's health
// checks) fails the request at once, naming it, rather than at the request timeout.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/json_input.hpp"
#include "router/pd_body.hpp"
#include "router/router_impl.hpp"

namespace rl::router {

using nlohmann::json;

namespace {

enum Side { kPrefill = 0, kDecode = 1 };
const char* side_name(int s) { return s == kPrefill ? "prefill" : "decode"; }
WorkerType side_type(int s) { return s == kPrefill ? WorkerType::prefill : WorkerType::decode; }

// What an engine said in its error body: error.message, error (a string) or message;
// else the body's start.
std::string error_text(const std::string& body) {
  try {
    const json j = json::parse(body);
    if (j.is_object()) {
      if (auto e = j.find("error"); e != j.end()) {
        if (e->is_string()) return e->get<std::string>();
        if (e->is_object() && e->contains("message") && (*e)["message"].is_string()) return (*e)["message"].get<std::string>();
      }
      if (auto m = j.find("message"); m != j.end() && m->is_string()) return m->get<std::string>();
    }
  } catch (const std::exception&) {
  }
  return json_input::excerpt(body, 300);
}

// The client's response headers: the decode's (hop-by-hop ones dropped) and which
// workers served it.
net::ResponseHeaders answer_headers(const net::HeaderList& upstream, const std::string& decode,
                                    const std::string& prefill, int attempt) {
  net::ResponseHeaders hs;
  for (auto& [k, v] : upstream)
    if (!hop_by_hop(k)) hs.emplace_back(k, v);
  hs.emplace_back("x-rlhost-worker", decode);
  hs.emplace_back("x-rlhost-prefill-worker", prefill);
  if (attempt > 0) hs.emplace_back("x-rlhost-attempts", std::to_string(attempt + 1));
  return hs;
}

}  // namespace

struct PdExchange : std::enable_shared_from_this<PdExchange> {
  struct Leg {
    uint64_t worker = 0;  // registry id while in flight (its load counted)
    std::string url;
    uint64_t transfer = 0;
    bool pooled = false;
    bool done = false;
    net::HttpResult result;
  };

  Router::Impl* r = nullptr;
  Res res;
  std::string method, target, endpoint;
  net::HeaderList headers;
  json body;
  std::string text, key;
  bool stream = false;
  double started = 0;
  int attempt = 0;
  std::vector<uint64_t> tried[2];
  Leg leg[2];
  uint64_t backoff_timer = 0;
  uint64_t grace_timer = 0;  // decode failed first: how long the prefill's error may take to come
  static constexpr double kErrorGrace_s = 1.0;
  bool relaying = false;  // decode's stream is going to the client
  bool finished = false;

  void dispatch();
  void send(int s, Worker& w, const std::string& payload, double now);
  void on_done(int s, net::HttpResult&& result);
  void on_decode_chunk(std::string_view bytes);
  void begin_relay(long status, const net::HeaderList& upstream, std::string_view first);
  bool failed(int s) const {
    const auto& x = leg[s].result;
    return !x.ok || x.response.status < 200 || x.response.status >= 300;
  }
  void answer_error(int s);
  void answer_merged();
  void cancel(int s);
  void release(int s);
  void fail(int status, const std::string& type, const std::string& message);
  void client_gone();
  void worker_removed(int s);
  void stop_timers();
};

void PdExchange::release(int s) {
  if (!leg[s].worker) return;
  if (Worker* w = r->registry.by_id(leg[s].worker)) r->registry.on_released(*w);
  leg[s].worker = 0;
}

void PdExchange::cancel(int s) {
  if (leg[s].transfer) leg[s].pooled ? r->upstream->cancel(leg[s].transfer) : r->client->cancel(leg[s].transfer);
  leg[s].transfer = 0;
  release(s);
}

void PdExchange::fail(int status, const std::string& type, const std::string& message) {
  finished = true;
  const std::string& who = !leg[kDecode].url.empty() ? leg[kDecode].url : "none";
  r->metrics.record_request(who, endpoint, status, EventLoop::now() - started);
  if (res->alive() && !res->started()) r->send_error(res, status, type, message);
  else res->abort();
}

void PdExchange::dispatch() {
  const double now = EventLoop::now();
  Worker* picked[2] = {nullptr, nullptr};
  for (int s : {kPrefill, kDecode}) {
    auto usable = [&](std::vector<Worker*> c) {
      // A prefill worker is usable once its bootstrap port is known.
      if (s == kPrefill) c.erase(std::remove_if(c.begin(), c.end(), [](Worker* w) { return w->bootstrap_port == 0; }), c.end());
      return c;
    };
    std::vector<Worker*> cands = usable(r->registry.available(now, tried[s], side_type(s)));
    if (cands.empty() && !tried[s].empty()) cands = usable(r->registry.available(now, {}, side_type(s)));
    if (cands.empty()) {
      r->metrics.record_rejected(s == kPrefill ? "no_prefill_worker" : "no_decode_worker");
      return fail(503, "service_unavailable",
                  std::string("PD mode: no ") + side_name(s) + " worker can take the request: " +
                      r->registry.why_unavailable(now, side_type(s)));
    }
    Policy& p = s == kPrefill ? *r->prefill_policy : *r->decode_policy;
    picked[s] = key.empty() ? p.pick(cands, RouteInput{text, key, now}) : rendezvous_pick(cands, key);
  }
  // The same body to both: the prefill's bootstrap address and a fresh room (per item).
  json b = body;
  pd::add_bootstrap(b, pd::url_host(picked[kPrefill]->url), picked[kPrefill]->bootstrap_port, r->rng);
  const std::string payload = b.dump(-1, ' ', false, json::error_handler_t::replace);
  for (int s : {kPrefill, kDecode}) send(s, *picked[s], payload, now);
}

void PdExchange::send(int s, Worker& w, const std::string& payload, double now) {
  r->registry.on_dispatch(w);
  r->metrics.record_pd_dispatch(side_name(s), w.url);
  Leg& l = leg[s];
  l = Leg{};
  l.worker = w.id;
  l.url = w.url;
  tried[s].push_back(w.id);
  net::HttpRequest hr;
  hr.method = method;
  hr.url = w.url + target;
  hr.headers = headers;
  hr.body = payload;
  hr.timeout_s = std::max(0.001, r->opts.request_timeout_s - (now - started));
  auto self = shared_from_this();
  auto done = [self, s](net::HttpResult&& result) { self->on_done(s, std::move(result)); };
  net::HttpClient::ChunkFn chunk;
  if (s == kDecode && stream) chunk = [self](std::string_view bytes) { self->on_decode_chunk(bytes); };
  l.pooled = w.url.rfind("http://", 0) == 0;
  l.transfer = l.pooled ? r->upstream->submit(std::move(hr), std::move(done), std::move(chunk))
                        : r->client->submit(std::move(hr), std::move(done), std::move(chunk));
}

void PdExchange::begin_relay(long status, const net::HeaderList& upstream, std::string_view first) {
  relaying = true;
  const net::ResponseHeaders hs = answer_headers(upstream, leg[kDecode].url, leg[kPrefill].url, attempt);
  res->start(static_cast<int>(status ? status : 200), hs, std::nullopt);
  if (!first.empty()) res->write(first);
}

// Streaming: decode's bytes go to the client as they come (a non-2xx answer is held:
// it becomes an error naming the decode worker once it ends).
void PdExchange::on_decode_chunk(std::string_view bytes) {
  if (finished) return;
  Leg& d = leg[kDecode];
  if (!relaying) {
    const net::HttpResponse* up = d.pooled ? r->upstream->peek(d.transfer) : r->client->peek(d.transfer);
    const long status = up ? up->status : 200;
    if (status < 200 || status >= 300) {
      d.result.response.body.append(bytes);
      return;
    }
    begin_relay(status, up ? up->headers : net::HeaderList{}, bytes);
    return;
  }
  res->write(bytes);
  if (d.pooled && res->buffered() > (1u << 20) && r->upstream->pause(d.transfer, true)) {
    std::weak_ptr<PdExchange> weak = shared_from_this();
    res->on_drain([weak] {
      if (auto e = weak.lock(); e && e->leg[kDecode].transfer && !e->finished) e->r->upstream->pause(e->leg[kDecode].transfer, false);
    });
  }
}

void PdExchange::on_done(int s, net::HttpResult&& result) {
  Leg& l = leg[s];
  l.transfer = 0;
  Worker* w = r->registry.by_id(l.worker);
  release(s);
  // Streamed bytes held from a non-2xx decode answer: keep them as the body.
  std::string held = std::move(l.result.response.body);
  l.result = std::move(result);
  if (l.result.response.body.empty()) l.result.response.body = std::move(held);
  l.done = true;
  const double now = EventLoop::now();
  const bool refused = !l.result.ok && !l.result.timed_out && !l.result.sent;
  // Health bookkeeping: only connection errors move the circuit breaker in PD mode.
  if (!l.result.ok) {
    r->metrics.record_upstream_error(l.url, l.result.timed_out ? "timeout" : "connect");
    r->metrics.record_pd_error(side_name(s), l.url, l.result.timed_out ? "timeout" : "connect");
    if (w) {
      if (l.result.timed_out) {
        r->registry.on_soft_failure(*w, l.result.error);
      } else {
        r->registry.on_failure(*w, now, l.result.error);
        w->next_probe_at = 0;  // probe it now
      }
    }
  } else if (l.result.response.status >= 500) {
    r->metrics.record_upstream_error(l.url, "http_5xx");
    r->metrics.record_pd_error(side_name(s), l.url, "http_5xx");
    if (w) r->registry.on_soft_failure(*w, "HTTP " + std::to_string(l.result.response.status) + " from " + l.url);
  } else if (w) {
    r->registry.on_success(*w);
  }
  if (finished) return;
  const int other = 1 - s;

  // Refused before anything was sent: a new pair (and room) may still serve it.
  if (refused && !relaying && attempt < r->opts.max_retries && now - started < r->opts.request_timeout_s) {
    cancel(other);
    r->metrics.record_retry(l.url);
    attempt++;
    double delay = std::min(r->opts.retry_max_backoff_s, r->opts.retry_backoff_s * std::pow(2.0, attempt - 1));
    delay *= std::uniform_real_distribution<double>(0.5, 1.5)(r->rng);
    auto self = shared_from_this();
    backoff_timer = r->loop.call_later(delay, [self] {
      self->backoff_timer = 0;
      if (!self->finished) self->dispatch();
    });
    return;
  }

  if (s == kDecode && relaying) {  // the stream ended (cut short when !ok: the client sees it truncated)
    finished = true;
    if (l.result.ok) res->end();
    else res->abort();
    r->metrics.record_request(l.url, endpoint, l.result.ok ? static_cast<int>(l.result.response.status) : 502,
                              now - started);
    return;
  }
  if (s == kPrefill && relaying) return;  // decode is streaming already: its stream decides
  if (failed(s) && s == kDecode && !leg[kPrefill].done) {
    // The prefill's error, when it has one, says more (decode usually fails for want of
    // the KV): give it a moment, then stop it and answer the decode's.
    auto self = shared_from_this();
    if (!grace_timer)
      grace_timer = r->loop.call_later(kErrorGrace_s, [self] {
        self->grace_timer = 0;
        if (self->finished) return;
        self->cancel(kPrefill);
        self->answer_error(kDecode);
      });
    return;
  }
  if (failed(s) || (leg[other].done && failed(other))) {
    if (grace_timer) r->loop.cancel_timer(grace_timer);
    grace_timer = 0;
    // The other side waits for a partner that will not come: stop it.
    if (!leg[other].done) cancel(other);
    answer_error(leg[kPrefill].done && failed(kPrefill) ? kPrefill : kDecode);
    return;
  }
  if (!leg[other].done) return;  // wait for the other side
  answer_merged();  // (a decode stream that never sent a byte ends here too)
}

void PdExchange::answer_error(int s) {
  const Leg& l = leg[s];
  const auto& x = l.result;
  const std::string who = std::string(side_name(s)) + " worker " + l.url;
  if (!x.ok) {
    if (x.timed_out)
      return fail(504, "timeout", who + " did not answer within the request timeout (" +
                                      std::to_string(r->opts.request_timeout_s) + " s): " + x.error);
    return fail(502, "bad_gateway", who + " failed: " + x.error +
                                        (x.sent ? " (not retried: the request had reached it and its bootstrap room is spent)" : ""));
  }
  const int st = static_cast<int>(x.response.status);
  const bool client_error = st >= 400 && st < 500;
  fail(st >= 400 ? st : 502, client_error ? "invalid_request_error" : "bad_gateway",
       who + " answered HTTP " + std::to_string(st) + ": " + error_text(x.response.body));
}

void PdExchange::answer_merged() {
  const auto& d = leg[kDecode].result.response;
  std::string out = d.body;
  try {
    json dj = json::parse(d.body);
    json pj = json::parse(leg[kPrefill].result.response.body);
    pd::merge_response(body, pj, dj);
    out = dj.dump(-1, ' ', false, json::error_handler_t::replace);
  } catch (const std::exception&) {
    // Not JSON on one side: the decode's answer as it came.
  }
  const net::ResponseHeaders hs = answer_headers(d.headers, leg[kDecode].url, leg[kPrefill].url, attempt);
  finished = true;
  res->send(static_cast<int>(d.status), hs, out);
  r->metrics.record_request(leg[kDecode].url, endpoint, static_cast<int>(d.status), EventLoop::now() - started);
}

void PdExchange::client_gone() {
  if (finished) return;
  finished = true;
  cancel(kPrefill);
  cancel(kDecode);
  stop_timers();
  r->metrics.record_request(leg[kDecode].url.empty() ? "none" : leg[kDecode].url, endpoint, 499, EventLoop::now() - started);
}

void PdExchange::stop_timers() {
  if (backoff_timer) r->loop.cancel_timer(backoff_timer);
  backoff_timer = 0;
  if (grace_timer) r->loop.cancel_timer(grace_timer);
  grace_timer = 0;
}

void PdExchange::worker_removed(int s) {
  if (finished) return;
  const std::string url = leg[s].url;
  leg[s].worker = 0;  // gone from the registry: nothing to release
  stop_timers();
  for (int t : {kPrefill, kDecode}) cancel(t);
  r->metrics.record_upstream_error(url, "removed");
  fail(502, "bad_gateway", std::string("PD mode: the ") + side_name(s) + " worker " + url +
                               " left the router while it held the request (its KV room is spent: not retried)");
}

void Router::Impl::pd_worker_removed(uint64_t id) {
  std::vector<std::pair<std::shared_ptr<PdExchange>, int>> held;
  for (auto& e : pd_exchanges)
    if (auto x = e.lock(); x && !x->finished)
      for (int s : {kPrefill, kDecode})
        if (x->leg[s].worker == id) held.emplace_back(x, s);
  for (auto& [x, s] : held) x->worker_removed(s);
}

void Router::Impl::pd_proxy(net::ServerRequest& req, const Res& res) {
  auto ex = std::make_shared<PdExchange>();
  auto& live = pd_exchanges;
  if (live.size() >= pd_exchanges_prune_at) {  // amortised: the ended ones go
    live.erase(std::remove_if(live.begin(), live.end(), [](const std::weak_ptr<PdExchange>& e) {
      auto x = e.lock();
      return !x || x->finished;
    }), live.end());
    pd_exchanges_prune_at = std::max<size_t>(64, 2 * live.size());
  }
  live.push_back(ex);
  ex->r = this;
  ex->res = res;
  ex->started = EventLoop::now();
  ex->method = req.method;
  ex->target = req.target;
  ex->endpoint = req.path;
  ForwardHeaders fwd = forward_headers(req);
  ex->headers = std::move(fwd.headers);
  ex->key = std::move(fwd.key);
  if (!fwd.has_type) ex->headers.emplace_back("content-type", "application/json");
  try {
    ex->body = json_input::parse(req.body, "request body");
  } catch (const json_input::Error& e) {
    metrics.record_rejected("bad_request");
    metrics.record_request("none", req.path, 400, 0);
    return send_error(res, 400, "invalid_request_error",
                      req.method + " " + req.path + ": in PD mode the router adds the bootstrap fields to the body, "
                      "so it must be a JSON object: " + e.what());
  }
  if (!ex->body.is_object()) {
    metrics.record_rejected("bad_request");
    metrics.record_request("none", req.path, 400, 0);
    return send_error(res, 400, "invalid_request_error",
                      req.method + " " + req.path + ": in PD mode the body must be a JSON object (got " +
                          ex->body.type_name() + "; the router adds bootstrap_host/port/room to it)");
  }
  if (ex->key.empty()) ex->key = pd::body_routing_key(ex->body);
  ex->body.erase("routing_key");  // the router's to read: engines that check their fields would refuse it
  if (auto st = ex->body.find("stream"); st != ex->body.end() && st->is_boolean()) ex->stream = st->get<bool>();
  if (prefill_policy->needs_text() || decode_policy->needs_text()) ex->text = routing_text(ex->body);
  std::weak_ptr<PdExchange> weak = ex;
  res->on_close([weak] {
    if (auto e = weak.lock()) e->client_gone();
  });
  ex->dispatch();
}

}  // namespace rl::router
