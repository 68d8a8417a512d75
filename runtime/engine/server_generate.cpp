// POST /generate (SGLang's native generation) and the two ways a generation is
// answered, shared with the OpenAI endpoints: whole once the run finished
// (respond_when_done) or as server-sent events (respond_stream).
//
// Both run on the server's loop thread. The engine's scheduler thread only
// copies updates into a queue and posts one wake-up to the loop; the loop
// formats and writes. A client that goes away (the connection closes) aborts
// the run so the engine stops spending steps on it.
#include <deque>
#include <mutex>
#include <unordered_map>

#include "base/event_loop.hpp"
#include "base/log_text.hpp"
#include "base/json_input.hpp"
#include "engine/server.hpp"

namespace rl::engine {

using nlohmann::json;

struct EngineServer::Deferred {
  std::shared_ptr<GenerateRun> run;
  std::shared_ptr<net::Responder> res;
  BodyFormatter body;
  uint64_t timer = 0;
};

// A client that reads slower than the engine generates: while more than this is queued
// for its socket, nothing new is formatted, and since updates are cumulative (each holds
// its request's whole output so far) only the latest of each request is kept meanwhile.
// Such a client costs one update per request, not one per engine step.
constexpr size_t kStreamBacklogBytes = size_t(4) << 20;

struct EngineServer::Stream {
  std::shared_ptr<GenerateRun> run;
  std::shared_ptr<net::Responder> res;
  ChunkFormatter format;
  std::function<std::vector<std::string>(const std::vector<RequestOutput>&)> trailer;
  std::mutex mu;  // guards the queue: the scheduler thread appends
  std::deque<std::pair<size_t, RequestOutput>> items;
  bool done = false;
  bool posted = false;  // a drain is posted and has not run yet
};

// Parses the request body as JSON, or BadRequest saying where it broke.
json parse_json_body(const net::ServerRequest& req, bool allow_empty) {
  if (req.body.empty() && allow_empty) return json::object();
  if (req.body.empty()) throw BadRequest("request body: empty", "send a JSON object with Content-Type: application/json");
  try {
    return json_input::parse(req.body, "request body");
  } catch (const json_input::Error& e) {
    throw BadRequest(e.what());
  }
}

nlohmann::ordered_json parse_json_body_ordered(const net::ServerRequest& req) {
  try {
    return json_input::parse_ordered(req.body, "request body");
  } catch (const json_input::Error& e) {
    throw BadRequest(e.what());
  }
}

void EngineServer::on_generate(const Req& req, Res& res) {
  const json body = parse_json_body(req);
  GenerateCall call = parse_generate(body, *engine_, limits_);
  if (pd_) pd_->attach(body, call);  // prefill/decode: each request's room
  const model::Tokenizer* tok = engine_->tokenizer();
  if (call.stream) {
    const bool with_index = call.batched;
    // The formatter needs the call's per-request options; it keeps its own copy
    // (the run owns another; rids are filled in by the outputs themselves).
    auto shared = std::make_shared<GenerateCall>(call);
    respond_stream(std::move(call), res, [shared, tok, with_index](size_t i, const RequestOutput& out) {
      return std::vector<std::string>{dump_json(output_json(out, *shared, i, tok, with_index))};
    });
    return;
  }
  auto shared = std::make_shared<GenerateCall>(call);  // response_json reads the per-request options
  respond_when_done(std::move(call), res, [shared, tok](const std::vector<RequestOutput>& outs) {
    return dump_json(response_json(outs, *shared, tok));
  });
}

void EngineServer::respond_when_done(GenerateCall call, Res& res, BodyFormatter body) {
  if (hand_to_loop(res, [this, call, body](Res& r) mutable { respond_when_done(std::move(call), r, std::move(body)); }))
    return;
  const uint64_t id = next_deferred_++;
  EventLoop* loop = loop_.get();
  auto run = start_run(std::move(call), [this, loop, id](size_t, const RequestOutput&, bool last) {
    if (last) loop->post([this, id] {
      auto it = deferred_.find(id);
      if (it == deferred_.end()) return;
      auto d = std::move(it->second);
      deferred_.erase(it);
      if (d->timer) loop_->cancel_timer(d->timer);
      Reply r;
      try {
        r.set_content(d->body(d->run->outputs()), "application/json");
      } catch (const std::exception& e) {
        log::text(log::Level::error, std::string("engine server: formatting a response failed: ") + e.what());
        reply_json(r, 500, error_json(500, e.what()));
      }
      send(*d->res, r);
      note_response_bytes(r.body.size());
    });
  });
  auto d = std::make_shared<Deferred>();
  d->run = run;
  d->res = res.responder;
  d->body = std::move(body);
  // The run's last update posts the answer; until then the client's leaving
  // or the request timeout ends the run early (the answer then holds what was
  // generated, finish_reason abort).
  std::weak_ptr<GenerateRun> weak = run;
  d->res->on_close([weak] {
    if (auto r = weak.lock()) r->abort();
  });
  if (opts_.request_timeout_s > 0)
    d->timer = loop_->call_later(opts_.request_timeout_s, [this, id] {
      if (auto it = deferred_.find(id); it != deferred_.end()) {
        it->second->timer = 0;
        it->second->run->abort();
      }
    });
  deferred_.emplace(id, std::move(d));
  res.deferred = true;
}

void EngineServer::respond_stream(GenerateCall call, Res& res, ChunkFormatter format,
                                  std::function<std::vector<std::string>(const std::vector<RequestOutput>&)> trailer) {
  if (hand_to_loop(res, [this, call, format, trailer](Res& r) mutable {
        respond_stream(std::move(call), r, std::move(format), std::move(trailer));
      }))
    return;
  const uint64_t id = next_deferred_++;
  auto st = std::make_shared<Stream>();
  EventLoop* loop = loop_.get();
  std::weak_ptr<Stream> weak_st = st;
  st->run = start_run(std::move(call), [this, loop, id, weak_st](size_t i, const RequestOutput& out, bool last) {
    auto st = weak_st.lock();
    if (!st) return;  // the stream ended (client gone)
    std::lock_guard lk(st->mu);
    st->items.emplace_back(i, out);
    if (last) st->done = true;
    if (!st->posted) {
      st->posted = true;
      loop->post([this, id] { drain_stream(id); });
    }
  });
  st->res = res.responder;
  st->format = std::move(format);
  st->trailer = std::move(trailer);
  std::weak_ptr<GenerateRun> weak = st->run;
  st->res->on_close([this, weak, id] {
    if (auto r = weak.lock()) r->abort();
    loop_->post([this, id] { streams_.erase(id); });  // (not inside the responder's own callback)
  });
  st->res->on_drain([this, id] { drain_stream(id); });  // a slow client caught up
  metrics_.count_http(200);
  st->res->start(200, {{"Content-Type", "text/event-stream"}, {"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}});
  streams_.emplace(id, std::move(st));
  res.deferred = true;
}

void EngineServer::drain_stream(uint64_t id) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  std::shared_ptr<Stream> st = it->second;
  auto& res = *st->res;
  std::deque<std::pair<size_t, RequestOutput>> batch;
  bool done = false;
  {
    std::lock_guard lk(st->mu);
    st->posted = false;
    if (res.alive() && res.buffered() > kStreamBacklogBytes) {  // on_drain comes back here
      std::unordered_map<size_t, size_t> last;  // keep the latest update of each request
      for (size_t k = 0; k < st->items.size(); ++k) last[st->items[k].first] = k;
      std::deque<std::pair<size_t, RequestOutput>> kept;
      for (size_t k = 0; k < st->items.size(); ++k)
        if (last[st->items[k].first] == k) kept.push_back(std::move(st->items[k]));
      st->items.swap(kept);
      return;
    }
    batch.swap(st->items);
    done = st->done;
  }
  auto write = [&](const std::string& payload) {
    std::string ev;
    ev.reserve(payload.size() + 8);
    ev += "data: ";
    ev += payload;
    ev += "\n\n";
    res.write(ev);
  };
  try {
    for (auto& [i, out] : batch)
      for (const auto& p : st->format(i, out)) write(p);
    if (done) {
      if (st->trailer)
        for (const auto& p : st->trailer(st->run->outputs())) write(p);
      write("[DONE]");
      res.end();
    }
  } catch (const std::exception& e) {
    log::text(log::Level::error, std::string("engine server: stream failed: ") + e.what());
    st->run->abort();
    res.abort();
    done = true;
  }
  if (done || !res.alive()) streams_.erase(id);
}

}  // namespace rl::engine
