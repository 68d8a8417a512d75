// A fast stub worker for bench/router_bench.sh, on rl::net::EventServer.
//
//   bench_router_stub PORT [CHUNKS]
//
// POST /generate with "stream" in the body: an SSE stream of CHUNKS events
// (default 100), one event per loop turn so events leave as separate writes,
// like tokens from an engine; otherwise a small JSON answer. GET /health: ok.
// Why C++: a Python worker bounds the relay benchmark before any proxy does.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "net/event_server.hpp"

using rl::EventLoop;
using rl::net::EventServer;
using rl::net::Responder;
using rl::net::ServerRequest;

namespace {

// Writes one event per loop turn until `left` runs out.
void pump(EventLoop& loop, std::shared_ptr<Responder> res, int left, int n) {
  if (!res->alive()) return;
  if (left == 0) {
    res->write("data: [DONE]\n\n");
    res->end();
    return;
  }
  char ev[96];
  const int len = std::snprintf(ev, sizeof ev, "data: {\"text\":\"t\",\"meta_info\":{\"completion_tokens\":%d}}\n\n", n - left + 1);
  res->write(std::string_view(ev, static_cast<size_t>(len)));
  loop.call_later(0, [&loop, res, left, n] { pump(loop, res, left - 1, n); });
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PORT [CHUNKS]\n", argv[0]);
    return 2;
  }
  const int chunks = argc > 2 ? std::atoi(argv[2]) : 100;
  EventLoop loop;
  EventServer::Options o;
  o.port = std::atoi(argv[1]);
  EventServer srv(loop, o, [&](ServerRequest& req, std::shared_ptr<Responder> res) {
    if (req.path == "/generate" && req.body.find("\"stream\"") != std::string::npos) {
      res->start(200, {{"Content-Type", "text/event-stream"}});
      pump(loop, res, chunks, chunks);
      return;
    }
    if (req.path == "/health") return res->send(200, {{"Content-Type", "text/plain"}}, "ok");
    res->send_json(200, R"({"text":"ok","meta_info":{"completion_tokens":8}})");
  });
  try {
    srv.start();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_router_stub: %s\n", e.what());
    return 1;
  }
  std::printf("PORT %d\n", srv.port());
  std::fflush(stdout);
  loop.run();
}
