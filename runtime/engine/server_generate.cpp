// POST /generate (SGLang's native generation) and the server-sent-events
// plumbing shared with the OpenAI endpoints.
//
// Streaming: the engine's scheduler thread appends each update to a queue (a
// copy, never blocking); the worker thread that owns the connection drains it
// into `data: {...}\n\n` events. A failed write means the client left: the run
// is aborted so the engine stops spending steps on it.
#include <condition_variable>
#include <deque>
#include <mutex>

#include "base/log_text.hpp"
#include "base/json_input.hpp"
#include "engine/server.hpp"
#include "net/http_server.hpp"

namespace rl::engine {
namespace {

using nlohmann::json;

struct StreamQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<size_t, RequestOutput>> items;
  bool done = false;
};

}  // namespace

// Parses the request body as JSON, or BadRequest saying where it broke.
json parse_json_body(const httplib::Request& req, bool allow_empty) {
  if (req.body.empty() && allow_empty) return json::object();
  if (req.body.empty()) throw BadRequest("request body: empty", "send a JSON object with Content-Type: application/json");
  try {
    return json_input::parse(req.body, "request body");
  } catch (const json_input::Error& e) {
    throw BadRequest(e.what());
  }
}

nlohmann::ordered_json parse_json_body_ordered(const httplib::Request& req) {
  try {
    return json_input::parse_ordered(req.body, "request body");
  } catch (const json_input::Error& e) {
    throw BadRequest(e.what());
  }
}

void EngineServer::on_generate(const Req& req, Res& res) {
  const json body = parse_json_body(req);
  GenerateCall call = parse_generate(body, *engine_);
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
  const GenerateCall copy = call;  // response_json reads the per-request options
  const auto outs = run_blocking(std::move(call));
  res.set_content(dump_json(response_json(outs, copy, tok)), "application/json");
}

void EngineServer::respond_stream(GenerateCall call, Res& res, ChunkFormatter format,
                                  std::function<std::vector<std::string>(const std::vector<RequestOutput>&)> trailer) {
  auto q = std::make_shared<StreamQueue>();
  auto run = start_run(std::move(call), [q](size_t i, const RequestOutput& out, bool last) {
    std::lock_guard lk(q->mu);
    q->items.emplace_back(i, out);
    if (last) q->done = true;
    q->cv.notify_one();
  });
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  auto finished_stream = std::make_shared<bool>(false);
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, q, run, format = std::move(format), trailer = std::move(trailer), finished_stream](
          size_t, httplib::DataSink& sink) -> bool {
        // httplib does not catch exceptions from content providers: end the
        // stream (and the run) instead of letting one escape a worker thread.
        try {
        std::deque<std::pair<size_t, RequestOutput>> batch;
        bool done = false;
        {
          std::unique_lock lk(q->mu);
          // Wake up now and then to notice a server stop.
          q->cv.wait_for(lk, std::chrono::milliseconds(500), [&] { return !q->items.empty() || q->done; });
          batch.swap(q->items);
          done = q->done;
        }
        auto write = [&](const std::string& payload) {
          const std::string ev = "data: " + payload + "\n\n";
          return sink.write(ev.data(), ev.size());
        };
        for (auto& [i, out] : batch)
          for (const auto& p : format(i, out))
            if (!write(p)) {
              run->abort();  // the client went away
              return false;
            }
        if (done) {
          if (trailer)
            for (const auto& p : trailer(run->outputs()))
              if (!write(p)) return false;
          if (!write("[DONE]")) return false;
          *finished_stream = true;
          sink.done();
          return true;
        }
        if (stopping_) {
          run->abort();
          return false;
        }
        // Nothing new: probe the connection so a vanished client is noticed
        // even while the engine is slow (an SSE comment line is ignored by parsers).
        if (batch.empty() && !sink.is_writable()) {
          run->abort();
          return false;
        }
        return true;
        } catch (const std::exception& e) {
          log::text(log::Level::error, std::string("engine server: stream failed: ") + e.what());
          run->abort();
          return false;
        }
      },
      [run, finished_stream](bool success) {
        if (!success || !*finished_stream) run->abort();
      });
}

}  // namespace rl::engine
