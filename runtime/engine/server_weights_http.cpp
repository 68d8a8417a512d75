// POST /update_weights_from_safetensors: rlhost's weight update for engines the
// trainer reaches only by HTTP (other hosts, no shared filesystem, no c10d group).
// The body (application/octet-stream) is a safetensors file with some or all of the
// model's tensors under their Hugging Face names (or row slices: model/weight_buckets.hpp);
// the query string says the rest:
//   update_id=ID       parts of one update share it (default: ""); a new one drops an
//                      unfinished update
//   last=1|0           1 (default): install everything staged under update_id now
//   weight_version=V   the version the engine reports once installed
// -> {success, message, weight_version, installed, tensors, staged}. The staging and the
// install are engine/engine_http_weights.hpp's; this file stays LibTorch-free.
#include "base/buffer_pool.hpp"
#include "base/json_input.hpp"
#include "base/log_text.hpp"
#include "engine/server.hpp"

namespace rl::engine {

void EngineServer::on_update_weights_from_safetensors(const Req& req, Res& res) {
  const char* ep = "update_weights_from_safetensors";
  const std::string last_text = req.query_param("last");
  if (!last_text.empty() && last_text != "0" && last_text != "1" && last_text != "true" && last_text != "false")
    throw BadRequest(std::string(ep) + ": 'last' must be 1 or 0, got '" + json_input::excerpt(last_text) + "'",
                     "last=0 for every part of an update but its last");
  const bool last = last_text.empty() || last_text == "1" || last_text == "true";
  const std::string update_id = req.query_param("update_id");
  if (update_id.size() > 256) throw BadRequest(std::string(ep) + ": 'update_id' is longer than 256 bytes");
  std::optional<std::string> version;
  if (const std::string v = req.query_param("weight_version"); !v.empty()) version = v;
  // This route runs on a worker that owns its request (run_on_worker moved it there),
  // and nothing reads the body after this handler: the staging keeps it, uncopied, and
  // its buffer goes back to the pool the next large body comes from (base/buffer_pool.hpp).
  auto body = share_pooled(std::move(const_cast<Req&>(req).body));
  WeightStaging::Result r;
  try {
    r = weight_staging_.receive(*engine_, update_id, std::move(body), last, version);
  } catch (const std::exception& e) {
    reply_json(res, 400, {{"success", false}, {"message", e.what()}, {"weight_version", engine_->weight_version()}});
    return;
  }
  if (r.installed)
    log::info("engine server: weights updated over HTTP (" + std::to_string(r.staged) + " tensors, version " +
              r.weight_version + ")");
  reply_json(res, 200, {{"success", true},
                        {"message", r.installed ? "Succeeded to update model weights." : "Staged; waiting for last=1."},
                        {"weight_version", r.weight_version},
                        {"installed", r.installed},
                        {"tensors", r.tensors},
                        {"staged", r.staged}});
}

}  // namespace rl::engine
