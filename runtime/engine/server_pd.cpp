// Prefill/decode disaggregation's endpoints (engine/pd_bridge.hpp): the decode's
// POST /disagg/kv on the engine's port, and the prefill's bootstrap server.
#include "base/json_input.hpp"
#include "engine/server.hpp"

namespace rl::engine {

void EngineServer::on_disagg_kv(const Req& req, Res& res) {
  if (!pd_ || !pd_->decode())
    throw BadRequest("/disagg/kv: this engine is not a decode engine", "start it with --disaggregation-mode decode");
  PdReply r = pd_->on_kv(req);
  reply_json(res, r.status, r.body);
}

// The bootstrap port serves the decode's registration (and a health probe) only.
void EngineServer::dispatch_bootstrap(net::ServerRequest& req, std::shared_ptr<net::Responder> res) {
  Reply reply;
  if (req.path == "/health" && (req.method == "GET" || req.method == "HEAD")) {
    reply_json(reply, 200, nlohmann::json::object());
  } else if (req.path != "/disagg/register") {
    reply_json(reply, 404, error_json(404, "the bootstrap server has no " + json_input::excerpt(req.path) +
                                               " (POST /disagg/register only)"));
  } else if (req.method != "POST") {
    reply_json(reply, 405, error_json(405, "method not allowed: " + req.method + " /disagg/register"));
  } else if (!authorized(req)) {
    reply_json(reply, 401, error_json(401, "/disagg/register needs 'Authorization: Bearer <token>' with the run's admin token"));
  } else {
    PdReply r = pd_->on_register(req);
    reply_json(reply, r.status, r.body);
  }
  res->send(reply.status, {{"Content-Type", "application/json"}}, reply.body);
}

}  // namespace rl::engine
