// Distributed weight sync, SGLang's endpoints: /init_weights_update_group joins a
// c10d group as rank `rank_offset` (the trainer is rank 0 and hosts the store),
// /update_weights_from_distributed receives every named tensor by broadcast from
// rank 0 into the live weights, /destroy_weights_update_group leaves it. The
// c10d work lives in runtime/dist/dist.cpp (engine/engine_dist.hpp copies what it
// receives); this file stays LibTorch-free.
// rlhost's own pair for a trainer on the same machine: /init_weights_shm moves
// the weights into a two-buffer /dev/shm file and describes it,
// /update_weights_from_shm switches to the buffer the trainer has filled
// (engine/engine_shm.hpp). A LoRA adapter travels the same two ways
// (engine/engine_lora_sync.hpp): /init_lora_shm + /update_lora_from_shm, and
// /update_lora_from_distributed over a group joined as above; the adapter is installed
// under lora_name as /load_lora_adapter would.
#include "base/log_text.hpp"
#include "base/json_input.hpp"

#include <cstdlib>

#include "engine/engine_dist.hpp"
#include "engine/engine_lora_sync.hpp"
#include "engine/engine_shm.hpp"
#include "engine/server.hpp"
#include "dist/dist.hpp"

namespace rl::engine {
namespace {

using nlohmann::json;

const json& field(const json& body, const char* key, const char* endpoint) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) throw BadRequest(std::string(endpoint) + ": '" + key + "' is required");
  return *it;
}

std::string string_field(const json& body, const char* key, const char* endpoint, const std::string& dflt = {}) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) {
    if (!dflt.empty()) return dflt;
    throw BadRequest(std::string(endpoint) + ": '" + key + "' is required (a string)");
  }
  if (!it->is_string()) throw BadRequest(std::string(endpoint) + ": '" + key + "' must be a string, got " + json_input::brief(*it));
  return it->get<std::string>();
}

int int_field(const json& body, const char* key, const char* endpoint, int lo, int hi) {
  const json& v = field(body, key, endpoint);
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    throw BadRequest(std::string(endpoint) + ": '" + key + "' must be an integer in [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "], got " + json_input::brief(v));
  return v.get<int>();
}

// weight_version: a string, or a number taken as its text; absent: none.
std::optional<std::string> weight_version_field(const json& body, const char* endpoint) {
  auto it = body.find("weight_version");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_string() && !it->is_number())
    throw BadRequest(std::string(endpoint) + ": 'weight_version' must be a string, got " + json_input::brief(*it));
  return it->is_string() ? it->get<std::string>() : it->dump();
}

constexpr const char* kDefaultGroup = "weight_update_group";

dist::WeightMeta weight_meta_field(const json& body, const char* ep) {
  dist::WeightMeta meta;
  try {
    meta.names = field(body, "names", ep).get<std::vector<std::string>>();
    meta.dtypes = field(body, "dtypes", ep).get<std::vector<std::string>>();
    meta.shapes = field(body, "shapes", ep).get<std::vector<std::vector<int64_t>>>();
  } catch (const json::exception& e) {
    throw BadRequest(std::string(ep) + ": names (strings), dtypes (strings) and shapes (lists of integers) "
                     "expected: " + e.what());
  }
  return meta;
}

// rlhost's extension: the sender packs consecutive tensors into buckets of this size
int64_t bucket_bytes_field(const json& body, const char* ep) {
  if (!body.contains("bucket_bytes") || body["bucket_bytes"].is_null()) return 0;
  const auto& b = body["bucket_bytes"];
  if (!b.is_number_integer() || b.get<int64_t>() < 0)
    throw BadRequest(std::string(ep) + ": bucket_bytes must be an integer >= 0 (0: a broadcast per tensor)");
  return b.get<int64_t>();
}

// An adapter as adapter_config.json describes it: r, lora_alpha, target_modules.
LoraSpec lora_spec_field(const json& body, const char* ep) {
  const char* hint = "r, lora_alpha and target_modules as the adapter's adapter_config.json has them";
  LoraSpec spec;
  const json& r = field(body, "r", ep);
  if (!r.is_number_integer() || r.get<int64_t>() < 1)
    throw BadRequest(std::string(ep) + ": 'r' must be an integer >= 1, got " + json_input::brief(r), hint);
  spec.rank = r.get<int64_t>();
  const json& a = field(body, "lora_alpha", ep);
  if (!a.is_number() || !(a.get<double>() > 0))
    throw BadRequest(std::string(ep) + ": 'lora_alpha' must be a number > 0, got " + json_input::brief(a), hint);
  spec.alpha = a.get<double>();
  const json& t = field(body, "target_modules", ep);
  bool ok = t.is_array() && !t.empty();
  for (const auto& x : t) ok = ok && x.is_string();
  if (!ok)
    throw BadRequest(std::string(ep) + ": 'target_modules' must be a non-empty list of module names, got " +
                     json_input::brief(t), hint);
  spec.target_modules = t.get<std::vector<std::string>>();
  return spec;
}

}  // namespace

std::shared_ptr<dist::ProcessGroup> EngineServer::weight_group(const std::string& name) {
  std::lock_guard lk(groups_mu_);
  auto it = weight_groups_.find(name);
  return it == weight_groups_.end() ? nullptr : it->second;
}

// {master_address, master_port, rank_offset, world_size, group_name, backend,
//  timeout?}: blocks until every rank (the trainer included) has joined.
void EngineServer::on_init_weights_update_group(const Req& req, Res& res) {
  const char* ep = "init_weights_update_group";
  const json body = parse_json_body(req);
  dist::GroupOptions o;
  o.master_addr = string_field(body, "master_address", ep);
  o.master_port = int_field(body, "master_port", ep, 1, 65535);
  o.world_size = int_field(body, "world_size", ep, 2, 1 << 20);
  o.rank = int_field(body, "rank_offset", ep, 1, o.world_size - 1);
  o.name = string_field(body, "group_name", ep, kDefaultGroup);
  o.backend = string_field(body, "backend", ep, "gloo");
  const std::string& device = engine_->options().device;  // cpu | cuda | cuda:N
  if (device.rfind("cuda:", 0) == 0) o.device_index = std::atoi(device.c_str() + 5);
  if (o.backend == "nccl" && device.rfind("cuda", 0) != 0)
    throw BadRequest(std::string(ep) + ": backend 'nccl' needs an engine on a GPU; this one runs on " +
                     engine_->options().device, "use backend 'gloo'");
  if (o.backend != "gloo" && o.backend != "nccl")
    throw BadRequest(std::string(ep) + ": unknown backend '" + o.backend + "'", "use gloo or nccl");
  if (auto it = body.find("timeout"); it != body.end() && !it->is_null()) {
    if (!it->is_number() || !(it->get<double>() > 0))
      throw BadRequest(std::string(ep) + ": 'timeout' must be a positive number of seconds");
    o.timeout_s = it->get<double>();
  }
  if (weight_group(o.name))
    throw BadRequest(std::string(ep) + ": group '" + o.name + "' already exists",
                     "POST /destroy_weights_update_group first, or use another group_name");
  std::shared_ptr<dist::ProcessGroup> g;
  try {
    g = std::make_shared<dist::ProcessGroup>(o);
    g->connect();
  } catch (const rl::Error& e) {
    reply_json(res, 500, {{"success", false}, {"message", e.what()}});
    return;
  }
  {
    std::lock_guard lk(groups_mu_);
    weight_groups_[o.name] = g;
  }
  log::info("engine server: joined weight update group '" + o.name + "' as rank " + std::to_string(o.rank) + " of " +
            std::to_string(o.world_size));
  reply_json(res, 200, {{"success", true}, {"message", "Succeeded to initialize custom process group."}});
}

std::shared_ptr<dist::ProcessGroup> EngineServer::joined_group(const std::string& name, const char* ep) {
  auto g = weight_group(name);
  if (!g)
    throw BadRequest(std::string(ep) + ": no weight update group '" + json_input::excerpt(name) + "'",
                     "POST /init_weights_update_group first");
  return g;
}

// Runs a receive over group `name`; on failure replies (500 when the group broke, which
// drops it: init again; 400 otherwise) and returns false.
bool EngineServer::receive_in_group(const std::string& name, Res& res, const std::function<void()>& receive) {
  try {
    receive();
    return true;
  } catch (const std::exception& e) {
    const bool broken = std::string(e.what()).rfind("dist:", 0) == 0 || dynamic_cast<const GroupAbandoned*>(&e);
    if (broken) {
      std::lock_guard lk(groups_mu_);
      weight_groups_.erase(name);
    }
    reply_json(res, broken ? 500 : 400, {{"success", false}, {"message", e.what()}});
    return false;
  }
}

// {names, dtypes, shapes, group_name, flush_cache, weight_version}: receives each
// tensor by broadcast from rank 0, then swaps them in between two engine steps.
// The prefix cache is always flushed (its KV came from the old weights). A failed
// receive leaves the group unusable: it is dropped (init again).
void EngineServer::on_update_weights_from_distributed(const Req& req, Res& res) {
  const char* ep = "update_weights_from_distributed";
  const json body = parse_json_body(req);
  const std::string name = string_field(body, "group_name", ep, kDefaultGroup);
  auto g = joined_group(name, ep);
  const dist::WeightMeta meta = weight_meta_field(body, ep);
  const std::optional<std::string> version = weight_version_field(body, ep);
  const int64_t bucket_bytes = bucket_bytes_field(body, ep);
  log::info("engine server: receiving weights from group '" + name + "' (" + std::to_string(meta.names.size()) +
            " tensors, " + (bucket_bytes > 0 ? "buckets of up to " + std::to_string(bucket_bytes) + " bytes" : "a broadcast each") +
            ")");
  if (!receive_in_group(name, res, [&] { receive_weights(*engine_, *g, meta, version, bucket_bytes); })) return;
  const std::string v = engine_->weight_version();
  log::info("engine server: weights updated from group '" + name + "' (" + std::to_string(meta.names.size()) +
            " tensors, version " + v + ")");
  reply_json(res, 200, {{"success", true}, {"message", "Succeeded to update parameter online."}, {"weight_version", v}});
}

void EngineServer::on_destroy_weights_update_group(const Req& req, Res& res) {
  const json body = parse_json_body(req, true);
  const std::string name = string_field(body, "group_name", "destroy_weights_update_group", kDefaultGroup);
  std::shared_ptr<dist::ProcessGroup> g;
  {
    std::lock_guard lk(groups_mu_);
    auto it = weight_groups_.find(name);
    if (it != weight_groups_.end()) {
      g = std::move(it->second);
      weight_groups_.erase(it);
    }
  }
  if (!g) {
    reply_json(res, 400, {{"success", false}, {"message", "destroy_weights_update_group: no group '" + json_input::excerpt(name) + "'"}});
    return;
  }
  g.reset();
  reply_json(res, 200, {{"success", true}, {"message", "Succeeded to destroy custom process group."}});
}

// {} -> {success, id, path, buffer_bytes, buffers, active, tensors, next_buffer}
void EngineServer::on_init_weights_shm(const Req& req, Res& res) {
  parse_json_body(req, true);
  json out;
  try {
    out = share_weights(*engine_);
  } catch (const rl::Error& e) {
    reply_json(res, 400, {{"success", false}, {"message", e.what()}});
    return;
  }
  out["next_buffer"] = 1 - out["active"].get<int>();
  out["success"] = true;
  out["message"] = "Weights are in shared memory.";
  reply_json(res, 200, out);
}

// {id, buffer, weight_version?} -> {success, weight_version, next_buffer}
void EngineServer::on_update_weights_from_shm(const Req& req, Res& res) {
  const char* ep = "update_weights_from_shm";
  const json body = parse_json_body(req);
  const std::string id = string_field(body, "id", ep);
  const int buffer = int_field(body, "buffer", ep, 0, 1);
  const std::optional<std::string> version = weight_version_field(body, ep);
  try {
    update_weights_from_shm(*engine_, id, buffer, version);
  } catch (const rl::Error& e) {
    reply_json(res, 400, {{"success", false}, {"message", e.what()}});
    return;
  }
  const std::string v = engine_->weight_version();
  log::info("engine server: weights updated from shared buffer " + std::to_string(buffer) + " (version " + v + ")");
  reply_json(res, 200, {{"success", true}, {"message", "Succeeded to update model weights."}, {"weight_version", v},
                        {"next_buffer", 1 - buffer}});
}

// {lora_name, r, lora_alpha, target_modules} -> {success, id, path, buffer_bytes, buffers,
// active, tensors, next_buffer}: a two-buffer file for that adapter's tensors.
void EngineServer::on_init_lora_shm(const Req& req, Res& res) {
  const char* ep = "init_lora_shm";
  const json body = parse_json_body(req);
  const std::string name = string_field(body, "lora_name", ep);
  const LoraSpec spec = lora_spec_field(body, ep);
  json out;
  try {
    out = share_lora(*engine_, name, spec);
  } catch (const rl::Error& e) {
    reply_json(res, 400, {{"success", false}, {"message", e.what()}});
    return;
  }
  out["next_buffer"] = 1 - out["active"].get<int>();
  out["success"] = true;
  out["message"] = "The adapter's buffers are in shared memory.";
  reply_json(res, 200, out);
}

// {lora_name, id, buffer, weight_version?} -> {success, weight_version, next_buffer, adapter}
void EngineServer::on_update_lora_from_shm(const Req& req, Res& res) {
  const char* ep = "update_lora_from_shm";
  const json body = parse_json_body(req);
  const std::string name = string_field(body, "lora_name", ep);
  const std::string id = string_field(body, "id", ep);
  const int buffer = int_field(body, "buffer", ep, 0, 1);
  LoraInfo info;
  try {
    info = update_lora_from_shm(*engine_, name, id, buffer, weight_version_field(body, ep));
  } catch (const rl::Error& e) {
    reply_json(res, 400, {{"success", false}, {"message", e.what()}, {"loaded_adapters", loaded_adapters()}});
    return;
  }
  reply_json(res, 200, {{"success", true}, {"message", "LoRA adapter '" + name + "' updated."},
                        {"weight_version", info.version}, {"next_buffer", 1 - buffer}, {"adapter", lora_json(info)}});
}

// {lora_name, r, lora_alpha, target_modules, names, dtypes, shapes, group_name,
//  bucket_bytes?, weight_version?}: the adapter's tensors by broadcast from rank 0 of a
// group joined with /init_weights_update_group, installed under lora_name.
void EngineServer::on_update_lora_from_distributed(const Req& req, Res& res) {
  const char* ep = "update_lora_from_distributed";
  const json body = parse_json_body(req);
  const std::string group = string_field(body, "group_name", ep, kDefaultGroup);
  auto g = joined_group(group, ep);
  const std::string name = string_field(body, "lora_name", ep);
  const LoraSpec spec = lora_spec_field(body, ep);
  const dist::WeightMeta meta = weight_meta_field(body, ep);
  const auto version = weight_version_field(body, ep);
  const int64_t bucket_bytes = bucket_bytes_field(body, ep);
  LoraInfo info;
  if (!receive_in_group(group, res, [&] { info = receive_lora(*engine_, *g, meta, name, spec, version, bucket_bytes); }))
    return;
  reply_json(res, 200, {{"success", true}, {"message", "LoRA adapter '" + name + "' updated."},
                        {"weight_version", info.version}, {"adapter", lora_json(info)}});
}

}  // namespace rl::engine
