// /generate: request parsing (SGLang's GenerateReqInput), response JSON, and the
// run that fans a call out to the engine and gathers the outputs.
#include "engine/generate_api.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <set>

#include "base/json_input.hpp"
#include "model/tokenizer.hpp"
#include "nn/weights_digest.hpp"

namespace rl::engine {
namespace {

using nlohmann::json;

// SGLang fields rlhost accepts and ignores when they hold their neutral value
// (null/false/absent): anything else would silently change results.
const std::set<std::string> kNeutralWhenNull = {
    "image_data", "video_data", "audio_data", "input_embeds", "lora_id",
    "custom_logit_processor", "session_params", "bootstrap_host", "bootstrap_port",
    "bootstrap_room", "bootstrap_pair_key", "token_ids_logprob", "modalities", "return_hidden_states",
    "return_routed_experts", "require_reasoning", "conversation_id", "label"};
// Fields with no effect on results (routing, logging): accepted whatever they hold.
const std::set<std::string> kHarmless = {"log_metrics", "data_parallel_rank", "priority", "extra_key",
                                         "no_logs", "routed_dp_rank", "background", "stream_options",
                                         "received_time", "return_bytes", "routing_key"};
const std::set<std::string> kKnown = {"text", "input_ids", "sampling_params", "rid", "return_logprob",
                                      "top_logprobs_num", "logprob_start_len", "stream",
                                      "return_text_in_logprobs", "lora_path"};

bool neutral(const json& v) { return v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_array() && v.empty()); }

std::string type_of(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "a list";
    case json::value_t::object: return "an object";
    default: return "a number";
  }
}

[[noreturn]] void bad(const std::string& field, const std::string& what, const std::string& hint = {}) {
  throw BadRequest(json_input::excerpt(field, 120) + ": " + what, hint);  // field names may be client keys
}

std::vector<int32_t> ids_of(const json& v, const std::string& where) {
  if (!v.is_array()) bad(where, "expected a list of token ids, got " + type_of(v));
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (size_t k = 0; k < v.size(); ++k) {
    const json& e = v[k];
    if (!e.is_number_integer()) bad(where + "[" + std::to_string(k) + "]", "expected an integer token id, got " + type_of(e));
    const int64_t id = e.get<int64_t>();
    if (id < 0 || id > INT32_MAX) bad(where + "[" + std::to_string(k) + "]", "token id " + std::to_string(id) + " is out of range");
    ids.push_back(static_cast<int32_t>(id));
  }
  if (ids.empty()) bad(where, "empty prompt", "give at least one token id");
  return ids;
}

// Field `key` of the body for prompt i of `batch` prompts: a per-prompt list
// when the call is batched and the value is a list, else the same value for all.
const json* per_prompt(const json& body, const char* key, size_t i, size_t batch, bool batched, bool list_is_value,
                       std::string& where) {
  auto it = body.find(key);
  where = key;
  if (it == body.end() || it->is_null()) return nullptr;
  if (batched && it->is_array() && !list_is_value) {
    if (it->size() != batch)
      bad(key, "has " + std::to_string(it->size()) + " entries for " + std::to_string(batch) + " prompts",
          "give one value for all prompts or one per prompt");
    where = std::string(key) + "[" + std::to_string(i) + "]";
    return &(*it)[i];
  }
  return &*it;
}

json logprob_entry(float lp, int32_t id, const model::Tokenizer* tok, bool text) {
  json e = json::array({lp, id, nullptr});
  if (text && tok) e[2] = tok->decode({id});
  return e;
}

json top_entries(const std::vector<std::pair<int32_t, float>>& pos, const model::Tokenizer* tok, bool text) {
  json row = json::array();
  for (const auto& [id, lp] : pos) row.push_back(logprob_entry(lp, id, tok, text));
  return row;
}

// logprob_start_len for prompt i (of `len` tokens): -1 (none) or a prompt position.
int64_t logprob_start_of(const json& body, size_t i, size_t batch, bool batched, int64_t len) {
  std::string where;
  const json* v = per_prompt(body, "logprob_start_len", i, batch, batched, false, where);
  if (!v) return -1;
  if (!v->is_number_integer() || (v->is_number_unsigned() && v->get<uint64_t>() > INT64_MAX))
    bad(where, "expected an integer (-1: no prompt log-probs), got " + json_input::brief(*v));
  const int64_t k = v->get<int64_t>();
  if (k < -1 || k >= len)
    bad(where,
        std::to_string(k) + " is not a position of the " + std::to_string(len) + "-token prompt",
        "give -1 (no prompt log-probs) or a position in [0, " + std::to_string(len - 1) + "]");
  return k;
}

}  // namespace

int64_t text_bytes_bound(const Engine& engine) {
  const model::Tokenizer* tok = engine.tokenizer();
  if (!tok) return 0;
  size_t longest = 1;
  for (int32_t id = 0; id < tok->vocab_size(); ++id)
    if (auto t = tok->id_to_token(id)) longest = std::max(longest, t->size());
  return engine.context_length() * static_cast<int64_t>(longest) * 4;
}

std::vector<int32_t> tokenize(const Engine& engine, const std::string& text, const std::string& where,
                              bool add_special_tokens, int64_t max_text_bytes) {
  const model::Tokenizer* tok = engine.tokenizer();
  if (!tok)
    bad(where, "text was given but the model has no tokenizer", "send input_ids, or start the engine with a tokenizer.json");
  if (text.empty()) bad(where, "empty prompt", "give a non-empty text");
  if (max_text_bytes > 0 && static_cast<int64_t>(text.size()) > max_text_bytes)
    bad(where,
        "a text of " + std::to_string(text.size()) + " bytes cannot fit the model's context of " +
            std::to_string(engine.context_length()) + " tokens (refused without tokenizing it)",
        "shorten the prompt");
  model::EncodeOptions eo;
  eo.add_special_tokens = add_special_tokens;
  auto ids = tok->encode(text, eo);
  if (ids.empty()) bad(where, "the text encodes to no tokens");
  return ids;
}

std::string check_lora_name(const Engine& engine, const std::string& name, const std::string& where) {
  if (name.empty()) return name;
  std::string loaded;
  for (const LoraInfo& a : engine.lora_adapters()) {
    if (a.name == name) return name;
    loaded += (loaded.empty() ? "" : ", ") + a.name;
  }
  bad(where, "no LoRA adapter named '" + json_input::excerpt(name) + "' is loaded (loaded: " +
                 (loaded.empty() ? std::string("none") : loaded) + ")",
      "load it first: POST /load_lora_adapter {\"lora_name\": ..., \"lora_path\": PEFT_DIR}");
}

std::string openai_lora_name(const json& body, const Engine& engine) {
  if (auto it = body.find("lora_path"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) bad("lora_path", "expected an adapter's name (a string), got " + type_of(*it));
    return check_lora_name(engine, it->get<std::string>(), "lora_path");
  }
  auto it = body.find("model");
  if (it == body.end() || !it->is_string()) return "";
  const std::string model = it->get<std::string>();
  if (model.empty() || model == engine.options().served_model_name) return "";
  for (const LoraInfo& a : engine.lora_adapters())
    if (a.name == model) return model;
  const auto colon = model.rfind(':');
  if (colon == std::string::npos) return "";  // another model's name: the base, as always
  return check_lora_name(engine, model.substr(colon + 1), "model");
}

void check_sequence_cap(size_t count, int64_t max_sequences) {
  if (max_sequences <= 0 || count <= static_cast<size_t>(max_sequences)) return;
  throw Refused(400, "max_sequences_per_request",
                "request has more than " + std::to_string(max_sequences) +
                    " sequences (prompts x n); the cap is max_sequences_per_request = " + std::to_string(max_sequences) +
                    " (hint: split the request, or raise --max-sequences-per-request)");
}

int64_t top_logprobs_of(const json& v, const std::string& where, const CallLimits& limits) {
  const int64_t max = limits.max_top_logprobs > 0 ? limits.max_top_logprobs : 1024;
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > max)
    bad(where, "expected an integer in [0, " + std::to_string(max) + "], got " + json_input::brief(v),
        "the cap is max_top_logprobs = " + std::to_string(max) + " (--max-top-logprobs)");
  return v.get<int64_t>();
}

void check_response_size(const GenerateCall& call, const Engine& engine, const CallLimits& limits) {
  if (limits.max_response_entries <= 0) return;
  const int64_t ctx = engine.context_length();
  double total = 0;  // (no overflow whatever the request asks)
  int64_t most_tokens = 0, most_top = 0;
  bool logprobs = false;
  for (const auto& r : call.requests) {
    const int64_t room = std::max<int64_t>(0, ctx - static_cast<int64_t>(r.input_ids.size()));
    const int64_t tokens = std::min<int64_t>(std::max<int64_t>(0, r.params.max_new_tokens), room);
    const int64_t per_token = 1 + (r.return_logprob ? 1 + r.top_logprobs_num : 0);
    total += static_cast<double>(tokens) * static_cast<double>(per_token);
    // Prompt log-probs: an id, a log-prob and the top ones per position from logprob_start_len.
    if (r.logprob_start_len >= 0)
      total += static_cast<double>(static_cast<int64_t>(r.input_ids.size()) - r.logprob_start_len) *
               static_cast<double>(2 + r.top_logprobs_num);
    most_tokens = std::max(most_tokens, tokens);
    most_top = std::max(most_top, r.top_logprobs_num);
    logprobs = logprobs || r.return_logprob;
  }
  if (total <= static_cast<double>(limits.max_response_entries)) return;
  char n[32];
  std::snprintf(n, sizeof n, "%.0f", total);
  throw Refused(400, "max_response_entries",
                "the response could hold " + std::string(n) + " values (" + std::to_string(call.requests.size()) +
                    " sequence(s) x up to " + std::to_string(most_tokens) + " tokens (max_new_tokens, else the context) x " +
                    (logprobs ? "(id + log-prob + " + std::to_string(most_top) + " top log-probs)" : std::string("1 id")) +
                    "), more than the cap max_response_entries = " + std::to_string(limits.max_response_entries) +
                    " (hint: ask for fewer sequences (n), a smaller max_new_tokens or top_logprobs_num, or raise "
                    "--max-response-entries)");
}

GenerateCall parse_generate(const json& body, const Engine& engine, const CallLimits& limits) {
  const int64_t max_sequences = limits.max_sequences;
  if (!body.is_object()) bad("request body", "expected a JSON object, got " + type_of(body));
  for (auto& [k, v] : body.items()) {
    if (kKnown.count(k) || kHarmless.count(k)) continue;
    // A prefill or decode engine reads these itself (engine/pd_bridge.hpp).
    if (limits.pd_fields && (k == "bootstrap_host" || k == "bootstrap_port" || k == "bootstrap_room")) continue;
    if (kNeutralWhenNull.count(k)) {
      if (!neutral(v))
        bad(k, "is not supported by rlhost" + std::string(k.rfind("bootstrap_", 0) == 0 ? " on an engine not in prefill/decode mode" : ""),
            k.rfind("bootstrap_", 0) == 0 ? "start the engines with --disaggregation-mode prefill|decode, or leave it out"
                                           : "leave it out or null");
      continue;
    }
    bad(k, "unknown field", "SGLang's /generate fields: text, input_ids, sampling_params, rid, return_logprob, "
                            "top_logprobs_num, logprob_start_len, stream, return_text_in_logprobs, lora_path");
  }
  const bool has_text = body.contains("text") && !body["text"].is_null();
  const bool has_ids = body.contains("input_ids") && !body["input_ids"].is_null();
  if (has_text && has_ids) bad("text", "both text and input_ids were given", "send one of them");
  if (!has_text && !has_ids) bad("request body", "either 'text' or 'input_ids' is required");

  // Prompts.
  std::vector<std::vector<int32_t>> prompts;
  bool batched = false;
  if (has_text) {
    const json& t = body["text"];
    if (t.is_string()) {
      prompts.push_back(tokenize(engine, t.get<std::string>(), "text", true, limits.max_text_bytes));
    } else if (t.is_array()) {
      batched = true;
      if (t.empty()) bad("text", "empty list", "give at least one prompt");
      for (size_t i = 0; i < t.size(); ++i) {
        const std::string where = "text[" + std::to_string(i) + "]";
        if (!t[i].is_string()) bad(where, "expected a string, got " + type_of(t[i]));
        prompts.push_back(tokenize(engine, t[i].get<std::string>(), where, true, limits.max_text_bytes));
      }
    } else {
      bad("text", "expected a string or a list of strings, got " + type_of(t));
    }
  } else {
    const json& ids = body["input_ids"];
    if (!ids.is_array()) bad("input_ids", "expected a list of token ids (or a list of such lists), got " + type_of(ids));
    if (!ids.empty() && ids[0].is_array()) {
      batched = true;
      for (size_t i = 0; i < ids.size(); ++i) prompts.push_back(ids_of(ids[i], "input_ids[" + std::to_string(i) + "]"));
    } else {
      prompts.push_back(ids_of(ids, "input_ids"));
    }
  }
  const size_t batch = prompts.size();

  GenerateCall call;
  call.batched = batched;
  if (auto it = body.find("stream"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) bad("stream", "expected true or false, got " + type_of(*it));
    call.stream = it->get<bool>();
  }
  if (auto it = body.find("return_text_in_logprobs"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) bad("return_text_in_logprobs", "expected true or false, got " + type_of(*it));
    call.return_text_in_logprobs = it->get<bool>();
  }
  for (size_t i = 0; i < batch; ++i) {
    std::string where;
    SamplingParams sp;
    if (const json* v = per_prompt(body, "sampling_params", i, batch, batched, false, where)) {
      try {
        sp = SamplingParams::from_json(*v, where);
      } catch (const BadRequest&) {
        throw;
      } catch (const rl::Error& e) {
        throw BadRequest(e.what());
      }
    }
    bool logprob = false;
    if (const json* v = per_prompt(body, "return_logprob", i, batch, batched, false, where)) {
      if (!v->is_boolean()) bad(where, "expected true or false, got " + type_of(*v));
      logprob = v->get<bool>();
    }
    int64_t top = 0;
    if (const json* v = per_prompt(body, "top_logprobs_num", i, batch, batched, false, where))
      top = top_logprobs_of(*v, where, limits);
    const int64_t start = logprob_start_of(body, i, batch, batched, static_cast<int64_t>(prompts[i].size()));
    std::string lora;
    if (const json* v = per_prompt(body, "lora_path", i, batch, batched, false, where); v && !v->is_null()) {
      if (!v->is_string()) bad(where, "expected an adapter's name (a string) or null, got " + type_of(*v),
                               batched ? "one name for all prompts, or a list with one name (or null) per prompt"
                                       : "the name the adapter was loaded under (POST /load_lora_adapter)");
      lora = check_lora_name(engine, v->get<std::string>(), where);
    }
    std::string rid;
    if (const json* v = per_prompt(body, "rid", i, batch, batched, false, where)) {
      if (!v->is_string()) bad(where, "expected a string, got " + type_of(*v));
      rid = v->get<std::string>();
      if (rid.empty()) bad(where, "empty request id");
    }
    const int64_t n = std::max<int64_t>(1, sp.n);
    check_sequence_cap(call.requests.size() + static_cast<size_t>(n), max_sequences);  // before building them
    for (int64_t j = 0; j < n; ++j) {
      GenerateRequest r;
      r.rid = rid.empty() ? std::string() : (n > 1 ? rid + "-" + std::to_string(j) : rid);
      r.input_ids = prompts[i];
      r.params = sp;
      r.params.n = 1;
      // Samples of one prompt must differ: a shared seed is offset per sample.
      if (n > 1 && sp.seed) r.params.seed = *sp.seed + static_cast<uint64_t>(j);
      r.return_logprob = logprob || top > 0;
      r.top_logprobs_num = top;
      r.logprob_start_len = r.return_logprob ? start : -1;  // SGLang ignores it without return_logprob
      r.stream = call.stream;
      r.lora_name = lora;
      call.requests.push_back(std::move(r));
    }
  }
  // One prompt with n > 1 answers with a list, as SGLang does.
  if (call.requests.size() > 1) call.batched = true;
  check_response_size(call, engine, limits);
  return call;
}

json finish_reason_json(const FinishReason& f, bool finished) {
  if (!finished || f.type.empty()) return nullptr;
  if (f.type == "stop") {
    json m = nullptr;
    if (f.matched_str) m = *f.matched_str;
    else if (f.matched_token) m = *f.matched_token;
    return {{"type", "stop"}, {"matched", m}};
  }
  if (f.type == "length") return {{"type", "length"}, {"length", f.length}};
  if (f.type == "abort") return {{"type", "abort"}, {"message", f.message}};
  return {{"type", f.type}};
}

json meta_info_json(const RequestOutput& out, const GenerateRequest& req, const model::Tokenizer* tok,
                    bool text_in_logprobs) {
  json m = json::object();
  m["id"] = out.rid;
  m["finish_reason"] = finish_reason_json(out.finish_reason, out.finished);
  m["prompt_tokens"] = out.prompt_tokens;
  m["completion_tokens"] = out.completion_tokens();
  m["cached_tokens"] = out.cached_tokens;
  m["weight_version"] = out.weight_version;
  if (!req.lora_name.empty()) {  // the adapter and the version it was at when the request finished
    m["lora_path"] = req.lora_name;
    m["lora_version"] = out.lora_version;
  }
  json spans = json::array();
  for (const auto& [start, version] : out.weight_version_spans) spans.push_back(json::array({start, version}));
  m["weight_version_spans"] = std::move(spans);
  // The proof that these log-probs are a trainer's own (docs/trainer.md, "Old log-probs
  // from the rollout"): the weights' digest at the temperature they are of.
  if (req.return_logprob && !out.weights_digest.empty())
    m["logprob_digest"] = nn::logprob_digest(out.weights_digest, req.params.greedy() ? 1.0 : req.params.temperature);
  m["queue_time"] = out.queue_time;
  m["prefill_time"] = out.prefill_time;
  m["decode_time"] = out.decode_time;
  m["e2e_latency"] = out.e2e_latency;
  m["decode_throughput"] = out.decode_throughput();
  m["arrival_time"] = out.arrival_time;
  m["preemptions"] = out.preemptions;
  for (const auto& [key, value] : out.pd_meta) m[key] = value;  // prefill/decode: pd_prefill_*, pd_decode_*, pd_transfer_*
  if (req.return_logprob) {
    json lps = json::array();
    const size_t n = std::min(out.output_logprobs.size(), out.output_ids.size());
    for (size_t k = 0; k < n; ++k) lps.push_back(logprob_entry(out.output_logprobs[k], out.output_ids[k], tok, text_in_logprobs));
    m["output_token_logprobs"] = std::move(lps);
    // Prompt log-probs, once the prefill has computed them: one entry per position from
    // logprob_start_len, the first null (SGLang's layout), then log p(token | tokens before).
    json in_lps = json::array(), in_tops = json::array();
    const int64_t k = req.logprob_start_len, P = static_cast<int64_t>(req.input_ids.size());
    if (k >= 0 && static_cast<int64_t>(out.input_logprobs.size()) == P - k - 1) {
      const bool tops = req.top_logprobs_num > 0 && out.input_top_logprobs.size() == out.input_logprobs.size();
      for (int64_t j = k; j < P; ++j) {
        const int32_t id = req.input_ids[static_cast<size_t>(j)];
        json e = logprob_entry(0, id, tok, text_in_logprobs);
        if (j == k) {
          e[0] = nullptr;
          in_tops.push_back(nullptr);
        } else {
          const auto at = static_cast<size_t>(j - k - 1);
          e[0] = out.input_logprobs[at];
          if (tops) in_tops.push_back(top_entries(out.input_top_logprobs[at], tok, text_in_logprobs));
        }
        in_lps.push_back(std::move(e));
      }
    }
    m["input_token_logprobs"] = std::move(in_lps);
    if (req.top_logprobs_num > 0) {
      json tops = json::array();
      for (const auto& pos : out.output_top_logprobs) tops.push_back(top_entries(pos, tok, text_in_logprobs));
      m["output_top_logprobs"] = std::move(tops);
      m["input_top_logprobs"] = std::move(in_tops);
    }
  }
  return m;
}

json output_json(const RequestOutput& out, const GenerateCall& call, size_t index, const model::Tokenizer* tok,
                 bool with_index) {
  json o = json::object();
  o["text"] = out.text;
  o["output_ids"] = out.output_ids;
  o["meta_info"] = meta_info_json(out, call.requests.at(index), tok, call.return_text_in_logprobs);
  if (with_index) o["index"] = index;
  return o;
}

json response_json(const std::vector<RequestOutput>& outs, const GenerateCall& call, const model::Tokenizer* tok) {
  if (!call.batched) return output_json(outs.at(0), call, 0, tok);
  json list = json::array();
  for (size_t i = 0; i < outs.size(); ++i) list.push_back(output_json(outs[i], call, i, tok));
  return list;
}

// ---- GenerateRun -------------------------------------------------------------------

GenerateRun::GenerateRun(Engine& engine, GenerateCall call, Listener listener)
    : engine_(engine), call_(std::move(call)), listener_(std::move(listener)), outs_(call_.requests.size()) {}

std::shared_ptr<GenerateRun> GenerateRun::start(Engine& engine, GenerateCall call, Listener listener) {
  std::shared_ptr<GenerateRun> run(new GenerateRun(engine, std::move(call), std::move(listener)));
  std::weak_ptr<GenerateRun> weak = run;
  for (size_t i = 0; i < run->call_.requests.size(); ++i) {
    GenerateRequest req = run->call_.requests[i];
    std::string rid;
    try {
      // The engine holds the callback; it keeps the run alive until the final update.
      rid = engine.submit(std::move(req), [run, i](const RequestOutput& out) { run->on_update(i, out); });
    } catch (const std::exception& e) {
      for (size_t k = 0; k < i; ++k) engine.abort(run->call_.requests[k].rid);
      const std::string where = run->call_.requests.size() > 1 ? "request " + std::to_string(i) + ": " : "";
      throw BadRequest(where + e.what());
    }
    std::lock_guard lk(run->mu_);
    run->call_.requests[i].rid = rid;
    if (run->outs_[i].rid.empty()) run->outs_[i].rid = rid;
  }
  return run;
}

void GenerateRun::on_update(size_t index, const RequestOutput& out) {
  bool last = false;
  {
    std::lock_guard lk(mu_);
    const bool was_finished = outs_[index].finished;
    outs_[index] = out;
    if (out.finished && !was_finished) ++finished_;
    last = out.finished && !was_finished && finished_ == outs_.size();
  }
  if (listener_) listener_(index, out, last);
  if (last) cv_.notify_all();
}

void GenerateRun::abort() {
  for (const auto& rid : rids())
    if (!rid.empty()) engine_.abort(rid);
}

bool GenerateRun::wait_for(double seconds) {
  std::unique_lock lk(mu_);
  return cv_.wait_for(lk, std::chrono::duration<double>(seconds), [&] { return finished_ == outs_.size(); });
}

void GenerateRun::wait() {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return finished_ == outs_.size(); });
}

bool GenerateRun::done() const {
  std::lock_guard lk(mu_);
  return finished_ == outs_.size();
}

std::vector<RequestOutput> GenerateRun::outputs() const {
  std::lock_guard lk(mu_);
  return outs_;
}

std::vector<std::string> GenerateRun::rids() const {
  std::lock_guard lk(mu_);
  std::vector<std::string> r;
  for (const auto& q : call_.requests) r.push_back(q.rid);
  return r;
}

}  // namespace rl::engine
