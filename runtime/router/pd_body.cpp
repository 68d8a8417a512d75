#include "router/pd_body.hpp"

namespace rl::router::pd {

using nlohmann::json;

size_t batch_size(const json& body) {
  if (!body.is_object()) return 0;
  if (auto it = body.find("text"); it != body.end() && it->is_array()) return it->size();
  if (auto it = body.find("input_ids"); it != body.end() && it->is_array() && !it->empty() && (*it)[0].is_array())
    return it->size();
  // OpenAI completions: a list of prompts (strings or token lists), not one token list.
  if (auto it = body.find("prompt"); it != body.end() && it->is_array() && !it->empty() && !(*it)[0].is_number())
    return it->size();
  return 0;
}

std::string url_host(std::string_view url) {
  if (const size_t s = url.find("://"); s != std::string_view::npos) url.remove_prefix(s + 3);
  if (const size_t slash = url.find('/'); slash != std::string_view::npos) url = url.substr(0, slash);
  if (!url.empty() && url.front() == '[') {
    const size_t close = url.find(']');
    return std::string(url.substr(1, close == std::string_view::npos ? std::string_view::npos : close - 1));
  }
  return std::string(url.substr(0, url.find(':')));
}

uint64_t new_room(std::mt19937_64& rng) { return rng() >> 1; }

void add_bootstrap(json& body, const std::string& host, int port, std::mt19937_64& rng) {
  const json p = port > 0 ? json(port) : json(nullptr);
  const size_t n = batch_size(body);
  if (n == 0) {
    body["bootstrap_host"] = host;
    body["bootstrap_port"] = p;
    body["bootstrap_room"] = new_room(rng);
    return;
  }
  json hosts = json::array(), ports = json::array(), rooms = json::array();
  for (size_t i = 0; i < n; ++i) {
    hosts.push_back(host);
    ports.push_back(p);
    rooms.push_back(new_room(rng));
  }
  body["bootstrap_host"] = std::move(hosts);
  body["bootstrap_port"] = std::move(ports);
  body["bootstrap_room"] = std::move(rooms);
}

namespace {

bool truthy(const json& v) { return v.is_boolean() ? v.get<bool>() : v.is_number() ? v.get<double>() != 0 : false; }

// return_logprob of item i (a batch may give one flag per item).
bool wants_logprob(const json& request, size_t i, bool batched) {
  if (!request.is_object()) return false;
  const auto it = request.find("return_logprob");
  if (it == request.end()) return false;
  if (it->is_array()) return batched && i < it->size() && truthy((*it)[i]);
  return truthy(*it);
}

bool starts_with(const std::string& s, std::string_view p) { return s.compare(0, p.size(), p) == 0; }

void merge_item(bool logprob, const json& prefill, json& decode) {
  if (!prefill.is_object() || !decode.is_object()) return;
  const auto pm = prefill.find("meta_info");
  if (pm == prefill.end() || !pm->is_object()) return;
  json& dm = decode["meta_info"];
  if (dm.is_null()) dm = json::object();
  if (!dm.is_object()) return;
  if (logprob) {
    for (const char* key : {"input_token_logprobs", "input_top_logprobs"}) {
      const auto pv = pm->find(key);
      const bool p_has = pv != pm->end() && pv->is_array();
      if (!p_has) continue;  // nothing to prepend
      json merged = *pv;
      if (const auto dv = dm.find(key); dv != dm.end() && dv->is_array())
        for (const auto& x : *dv) merged.push_back(x);
      dm[key] = std::move(merged);
    }
  }
  for (const auto& [k, v] : pm->items())
    if (starts_with(k, "pd_prefill_") || starts_with(k, "pd_transfer_")) dm[k] = v;
}

}  // namespace

void merge_response(const json& request, const json& prefill, json& decode) {
  if (decode.is_array()) {
    if (!prefill.is_array() || prefill.size() != decode.size()) return;
    for (size_t i = 0; i < decode.size(); ++i) merge_item(wants_logprob(request, i, true), prefill[i], decode[i]);
    return;
  }
  merge_item(wants_logprob(request, 0, false), prefill, decode);
}

std::string body_routing_key(const json& body) {
  if (!body.is_object()) return "";
  if (auto it = body.find("routing_key"); it != body.end() && it->is_string()) return it->get<std::string>();
  if (auto sp = body.find("session_params"); sp != body.end() && sp->is_object()) {
    if (auto id = sp->find("id"); id != sp->end()) {
      if (id->is_string()) return id->get<std::string>();
      if (id->is_number()) return id->dump();
    }
  }
  return "";
}

}  // namespace rl::router::pd
