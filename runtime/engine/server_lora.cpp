// LoRA adapter endpoints, SGLang's: POST /load_lora_adapter {lora_name, lora_path}
// loads a PEFT directory under a name (or replaces the adapter of that name in place,
// between two steps: a trainer's adapter sync), POST /unload_lora_adapter {lora_name}
// drops it (refused while requests use it). Both change weights, so both need the
// admin token (or --api-key) like the other weight endpoints (server.cpp's routes).
// Requests pick an adapter by name: /generate's lora_path, OpenAI's model.
#include "base/json_input.hpp"
#include "base/log_text.hpp"
#include "engine/server.hpp"

namespace rl::engine {
namespace {

using nlohmann::json;

std::string required_string(const json& body, const char* key, const char* ep, const char* hint) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) throw BadRequest(std::string(ep) + ": '" + key + "' is required", hint);
  if (!it->is_string() || it->get<std::string>().empty())
    throw BadRequest(std::string(ep) + ": '" + key + "' must be a non-empty string, got " + json_input::brief(*it), hint);
  return it->get<std::string>();
}

std::optional<std::string> version_of(const json& body, const char* ep) {
  auto it = body.find("weight_version");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_string() && !it->is_number())
    throw BadRequest(std::string(ep) + ": 'weight_version' must be a string, got " + json_input::brief(*it));
  return it->is_string() ? it->get<std::string>() : it->dump();
}

}  // namespace

json EngineServer::loaded_adapters() const {
  json m = json::object();
  for (const LoraInfo& a : engine_->lora_adapters()) m[a.name] = a.path;
  return m;
}

json lora_json(const LoraInfo& a) {
  return {{"name", a.name},       {"path", a.path},           {"rank", a.rank},        {"alpha", a.alpha},
          {"targets", a.targets}, {"version", a.version},     {"running_requests", a.requests}};
}

// {lora_name, lora_path, weight_version?} -> {success, error_message, loaded_adapters, version}.
// A bad directory or adapter: 400 naming it; the adapters loaded before stay as they were.
void EngineServer::on_load_lora_adapter(const Req& req, Res& res) {
  const char* ep = "load_lora_adapter";
  const json body = parse_json_body(req);
  const std::string name = required_string(body, "lora_name", ep, "the name requests will use (lora_path / model)");
  const std::string path = required_string(body, "lora_path", ep,
                                           "a PEFT adapter directory (adapter_config.json + adapter_model.safetensors)");
  const auto version = version_of(body, ep);
  LoraInfo info;
  try {
    info = engine_->load_lora_adapter(name, path, version);
  } catch (const rl::Error& e) {
    reply_json(res, 400, {{"success", false}, {"error_message", e.what()}, {"message", e.what()},
                          {"loaded_adapters", loaded_adapters()}});
    return;
  }
  reply_json(res, 200, {{"success", true}, {"error_message", ""}, {"message", "LoRA adapter '" + name + "' loaded."},
                        {"loaded_adapters", loaded_adapters()}, {"adapter", lora_json(info)},
                        {"weight_version", info.version}});
}

// {lora_name} -> {success, error_message, loaded_adapters}. An adapter that unfinished
// requests use is not unloaded: 400 saying how many (retry when they finish).
void EngineServer::on_unload_lora_adapter(const Req& req, Res& res) {
  const char* ep = "unload_lora_adapter";
  const json body = parse_json_body(req);
  const std::string name = required_string(body, "lora_name", ep, "the name the adapter was loaded under");
  try {
    engine_->unload_lora_adapter(name);
  } catch (const rl::Error& e) {
    reply_json(res, 400, {{"success", false}, {"error_message", e.what()}, {"message", e.what()},
                          {"loaded_adapters", loaded_adapters()}});
    return;
  }
  reply_json(res, 200, {{"success", true}, {"error_message", ""}, {"message", "LoRA adapter '" + name + "' unloaded."},
                        {"loaded_adapters", loaded_adapters()}});
}

}  // namespace rl::engine
