// The OpenAI API: POST /v1/completions, POST /v1/chat/completions (chat
// template from the model's tokenizer_config.json), GET /v1/models. Requests
// map onto the same engine calls as /generate; streaming sends OpenAI chunks
// (text deltas) over the same SSE plumbing (server_generate.cpp).
#include <chrono>
#include <map>
#include <set>

#include "engine/server.hpp"
#include "base/json_input.hpp"
#include "model/tokenizer.hpp"

namespace rl::engine {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// OpenAI fields that map onto sampling_params (name there), and fields accepted
// only at their neutral value.
const std::map<std::string, std::string> kSamplingFields = {
    {"temperature", "temperature"}, {"top_p", "top_p"}, {"top_k", "top_k"}, {"min_p", "min_p"},
    {"seed", "seed"}, {"stop", "stop"}, {"stop_token_ids", "stop_token_ids"}, {"n", "n"},
    {"ignore_eos", "ignore_eos"}, {"skip_special_tokens", "skip_special_tokens"},
    {"no_stop_trim", "no_stop_trim"}, {"min_tokens", "min_new_tokens"},
    {"frequency_penalty", "frequency_penalty"}, {"presence_penalty", "presence_penalty"},
    {"repetition_penalty", "repetition_penalty"}, {"spaces_between_special_tokens", "spaces_between_special_tokens"}};
const std::set<std::string> kIgnored = {"model", "user", "stream_options", "rid", "metadata", "store",
                                        "parallel_tool_calls", "service_level", "chat_template_kwargs",
                                        "tools", "tool_choice", "separate_reasoning", "stream_reasoning",
                                        "return_hidden_states", "lora_path", "session_params"};  // model, lora_path: openai_lora_name

// Builds the engine requests of one OpenAI call: prompts x n, like /generate.
GenerateCall openai_call(const json& body, std::vector<std::vector<int32_t>> prompts, const std::set<std::string>& extra_known,
                         bool logprobs, int64_t top_logprobs, const Engine& engine, const CallLimits& limits,
                         bool completions) {
  json sp = json::object();
  for (auto& [k, v] : body.items()) {
    if (auto m = kSamplingFields.find(k); m != kSamplingFields.end()) {
      if (!v.is_null()) sp[m->second] = v;
    } else if (limits.pd_fields && k.rfind("bootstrap_", 0) == 0) {
      // a prefill or decode engine's: read by EngineServer's PD bridge
    } else if (!kIgnored.count(k) && !extra_known.count(k)) {
      throw BadRequest(json_input::excerpt(k) + ": unknown field", "see docs/engine.md for the OpenAI fields rlhost accepts");
    }
  }
  // max_completion_tokens is the newer name of max_tokens.
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) continue;
    if (!it->is_number_integer() || it->get<int64_t>() < 0)
      throw BadRequest(std::string(key) + ": expected a non-negative integer, got " + json_input::brief(*it));
    sp["max_new_tokens"] = it->get<int64_t>();
  }
  if (sp.contains("seed")) {  // SGLang's name for the per-request seed
    sp["sampling_seed"] = sp["seed"];
    sp.erase("seed");
  }
  SamplingParams params;
  try {
    params = SamplingParams::from_json(sp, "request");
  } catch (const rl::Error& e) {
    throw BadRequest(e.what());
  }
  // OpenAI's default for completions; chat's is what the context leaves.
  if (completions && !body.contains("max_tokens") && !body.contains("max_completion_tokens")) params.max_new_tokens = 16;
  const std::string lora = openai_lora_name(body, engine);
  GenerateCall call;
  const int64_t n = std::max<int64_t>(1, params.n);
  check_sequence_cap(prompts.size() * static_cast<size_t>(n), limits.max_sequences);  // before building them
  for (auto& ids : prompts)
    for (int64_t j = 0; j < n; ++j) {
      GenerateRequest r;
      r.input_ids = ids;
      r.params = params;
      r.params.n = 1;
      if (n > 1 && params.seed) r.params.seed = *params.seed + static_cast<uint64_t>(j);
      r.return_logprob = logprobs || top_logprobs > 0;
      r.top_logprobs_num = top_logprobs;
      r.lora_name = lora;
      call.requests.push_back(std::move(r));
    }
  call.batched = call.requests.size() > 1;
  check_response_size(call, engine, limits);
  return call;
}

// The response's "model": the adapter's name for a request under one, else the served model's.
std::string model_name_of(const GenerateCall& call, const std::string& served) {
  return call.requests.empty() || call.requests[0].lora_name.empty() ? served : call.requests[0].lora_name;
}

json finish_reason_of(const RequestOutput& out) {
  if (!out.finished) return nullptr;
  return out.finish_reason.type.empty() ? json("stop") : json(out.finish_reason.type);
}

json matched_stop(const RequestOutput& out) {
  if (out.finish_reason.matched_str) return *out.finish_reason.matched_str;
  if (out.finish_reason.matched_token) return *out.finish_reason.matched_token;
  return nullptr;
}

std::string token_text(const model::Tokenizer* tok, int32_t id) { return tok ? tok->decode({id}) : std::to_string(id); }

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// Chat logprobs ({"content": [{token, logprob, bytes, top_logprobs}]}) for
// output positions [from, to).
json chat_logprobs(const RequestOutput& out, const GenerateRequest& req, const model::Tokenizer* tok, size_t from, size_t to) {
  json content = json::array();
  for (size_t k = from; k < to && k < out.output_logprobs.size(); ++k) {
    const std::string t = token_text(tok, out.output_ids[k]);
    json e = {{"token", t}, {"logprob", out.output_logprobs[k]}, {"bytes", bytes_of(t)}, {"top_logprobs", json::array()}};
    if (req.top_logprobs_num > 0 && k < out.output_top_logprobs.size())
      for (const auto& [id, lp] : out.output_top_logprobs[k]) {
        const std::string tt = token_text(tok, id);
        e["top_logprobs"].push_back({{"token", tt}, {"logprob", lp}, {"bytes", bytes_of(tt)}});
      }
    content.push_back(std::move(e));
  }
  return {{"content", std::move(content)}};
}

// Legacy completions logprobs: parallel lists. With echo (the request's prompt
// log-probs from position 0), the prompt's tokens first, the first one's log-prob null.
json completion_logprobs(const RequestOutput& out, const GenerateRequest& req, const model::Tokenizer* tok) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  size_t offset = 0;
  if (req.logprob_start_len == 0 && out.input_logprobs.size() + 1 == req.input_ids.size()) {
    const bool with_tops = req.top_logprobs_num > 0 && out.input_top_logprobs.size() == out.input_logprobs.size();
    for (size_t k = 0; k < req.input_ids.size(); ++k) {
      const std::string t = token_text(tok, req.input_ids[k]);
      tokens.push_back(t);
      lps.push_back(k == 0 ? json(nullptr) : json(out.input_logprobs[k - 1]));
      offsets.push_back(offset);
      offset += t.size();
      json top = json::object();
      if (k > 0 && with_tops)
        for (const auto& [id, lp] : out.input_top_logprobs[k - 1]) top[token_text(tok, id)] = lp;
      tops.push_back(k > 0 && req.top_logprobs_num > 0 ? top : json(nullptr));
    }
  }
  for (size_t k = 0; k < out.output_logprobs.size() && k < out.output_ids.size(); ++k) {
    const std::string t = token_text(tok, out.output_ids[k]);
    tokens.push_back(t);
    lps.push_back(out.output_logprobs[k]);
    offsets.push_back(offset);
    offset += t.size();
    json top = json::object();
    if (req.top_logprobs_num > 0 && k < out.output_top_logprobs.size())
      for (const auto& [id, lp] : out.output_top_logprobs[k]) top[token_text(tok, id)] = lp;
    tops.push_back(req.top_logprobs_num > 0 ? top : json(nullptr));
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json usage_of(const std::vector<RequestOutput>& outs, size_t n_per_prompt) {
  int64_t prompt = 0, completion = 0, cached = 0;
  for (size_t i = 0; i < outs.size(); ++i) {
    completion += outs[i].completion_tokens();
    // Samples of one prompt share it: count the prompt once, as OpenAI does.
    if (i % n_per_prompt == 0) {
      prompt += outs[i].prompt_tokens;
      cached += outs[i].cached_tokens;
    }
  }
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

// A stream's last chunk: the usage totals, when the client asked for them
// (stream_options.include_usage); nothing otherwise.
auto usage_tail(bool usage, std::string id, const char* object, int64_t created, std::string model, size_t per_prompt) {
  return [=](const std::vector<RequestOutput>& outs) {
    std::vector<std::string> chunks;
    if (usage)
      chunks.push_back(dump_json(json{{"id", id}, {"object", object}, {"created", created}, {"model", model},
                                      {"choices", json::array()}, {"usage", usage_of(outs, per_prompt)}}));
    return chunks;
  };
}

// Text added since `sent` characters; empty when the text is not an extension
// (a stop string trimmed at the end).
std::string delta_of(const std::string& text, size_t& sent) {
  if (text.size() <= sent) return {};
  std::string d = text.substr(sent);
  sent = text.size();
  return d;
}

bool include_usage(const json& body) {
  auto it = body.find("stream_options");
  return it != body.end() && it->is_object() && it->value("include_usage", false);
}

// One chat message as the templates expect it: an object with a string role and a
// content that is a string or null (a tool-calling assistant turn); OpenAI's list of
// content parts becomes the string of its text parts (a text-only model). Anything
// else is a BadRequest naming the message.
void normalize_message(ojson& msg, const std::string& where) {
  if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string())
    throw BadRequest(where + ": expected an object with a string 'role'");
  auto c = msg.find("content");
  if (c == msg.end() || c->is_null() || c->is_string()) return;
  if (!c->is_array())
    throw BadRequest(where + ".content: expected a string, a list of text parts or null, got " + json_input::brief(*c),
                     "send the message text as a string");
  std::string text;
  for (size_t k = 0; k < c->size(); ++k) {
    const auto& part = (*c)[k];
    const std::string pw = where + ".content[" + std::to_string(k) + "]";
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      throw BadRequest(pw + ": expected a content part {\"type\": \"text\", \"text\": ...}, got " + json_input::brief(part));
    if (part["type"].get<std::string>() != "text")
      throw BadRequest(pw + ".type: '" + json_input::excerpt(part["type"].get<std::string>(), 40) +
                       "' parts are not supported (the model reads text only)");
    auto t = part.find("text");
    if (t == part.end() || !t->is_string()) throw BadRequest(pw + ".text: expected a string");
    text += t->get<std::string>();
  }
  *c = text;
}

int64_t opt_top_logprobs(const json& body, const char* key, const CallLimits& limits) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return 0;
  return top_logprobs_of(*it, key, limits);
}

}  // namespace

void EngineServer::on_completions(const Req& req, Res& res) {
  const json body = parse_json_body(req);
  if (!body.is_object()) throw BadRequest("request body: expected a JSON object");
  auto p = body.find("prompt");
  if (p == body.end() || p->is_null()) throw BadRequest("prompt: required");
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> texts;  // each prompt's text, for echo (ids are decoded)
  auto ids_of = [](const json& v, const std::string& where) {
    std::vector<int32_t> ids;
    for (const auto& e : v) {
      if (!e.is_number_integer()) throw BadRequest(where + ": expected token ids, got " + json_input::brief(e));
      ids.push_back(e.get<int32_t>());
    }
    if (ids.empty()) throw BadRequest(where + ": empty prompt");
    return ids;
  };
  const model::Tokenizer* tok = engine_->tokenizer();
  auto text_of = [&](const std::vector<int32_t>& ids) { return tok ? tok->decode(ids) : std::string(); };
  if (p->is_string()) {
    prompts.push_back(tokenize(*engine_, p->get<std::string>(), "prompt", true, limits_.max_text_bytes));
    texts.push_back(p->get<std::string>());
  } else if (p->is_array() && !p->empty() && p->at(0).is_number_integer()) {
    prompts.push_back(ids_of(*p, "prompt"));
    texts.push_back(text_of(prompts.back()));
  } else if (p->is_array() && !p->empty()) {
    for (size_t i = 0; i < p->size(); ++i) {
      const auto& e = (*p)[i];
      const std::string where = "prompt[" + std::to_string(i) + "]";
      if (e.is_string()) {
        prompts.push_back(tokenize(*engine_, e.get<std::string>(), where, true, limits_.max_text_bytes));
        texts.push_back(e.get<std::string>());
      } else if (e.is_array()) {
        prompts.push_back(ids_of(e, where));
        texts.push_back(text_of(prompts.back()));
      } else {
        throw BadRequest(where + ": expected a string or a list of token ids");
      }
    }
  } else {
    throw BadRequest("prompt: expected a string, a list of strings or token ids, got " + json_input::brief(*p));
  }
  // echo: the prompt comes back before the completion, with its log-probs when asked
  // (the engine's prompt log-probs from position 0; max_tokens 0 scores the prompt only).
  bool echo = false;
  if (auto e = body.find("echo"); e != body.end() && !e->is_null()) {
    if (!e->is_boolean()) throw BadRequest("echo: expected true or false, got " + json_input::brief(*e));
    echo = e->get<bool>();
  }
  if (echo && body.value("stream", false))
    throw BadRequest("echo: not supported with stream", "leave stream out or false to echo the prompt");
  if (auto s = body.find("suffix"); s != body.end() && !s->is_null()) throw BadRequest("suffix: not supported by rlhost");
  if (auto b = body.find("best_of"); b != body.end() && !b->is_null() && *b != body.value("n", json(1)))
    throw BadRequest("best_of: only best_of == n is supported");
  const int64_t top = opt_top_logprobs(body, "logprobs", limits_);
  const bool logprobs = body.contains("logprobs") && !body["logprobs"].is_null();
  GenerateCall call = openai_call(body, std::move(prompts), {"prompt", "max_tokens", "max_completion_tokens", "stream",
                                                              "logprobs", "echo", "suffix", "best_of"},
                                  logprobs, top, *engine_, limits_, true);
  if (pd_) pd_->attach(body, call);  // prefill/decode: each request's room
  if (echo) {
    for (auto& r : call.requests)
      if (r.return_logprob) r.logprob_start_len = 0;
    check_response_size(call, *engine_, limits_);  // the prompts' log-probs count too
  }
  const bool stream = body.value("stream", false);
  const size_t per_prompt = static_cast<size_t>(std::max<int64_t>(1, body.value("n", int64_t{1})));
  const std::string id = "cmpl-" + std::to_string(unix_seconds()) + "-" + std::to_string(reinterpret_cast<uintptr_t>(&req) & 0xffffff);
  const int64_t created = unix_seconds();
  const std::string model = model_name_of(call, metrics_name());
  auto shared = std::make_shared<GenerateCall>(call);

  if (stream) {
    for (auto& r : call.requests) r.stream = true;
    auto sent = std::make_shared<std::map<size_t, size_t>>();
    const bool usage = include_usage(body);
    respond_stream(
        std::move(call), res,
        [=](size_t i, const RequestOutput& out) {
          std::vector<std::string> chunks;
          const std::string d = delta_of(out.text, (*sent)[i]);
          if (d.empty() && !out.finished) return chunks;
          json choice = {{"index", i}, {"text", d}, {"logprobs", nullptr}, {"finish_reason", finish_reason_of(out)}};
          if (out.finished) choice["matched_stop"] = matched_stop(out);
          json c = {{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model},
                    {"choices", json::array({choice})}};
          chunks.push_back(dump_json(c));
          return chunks;
        },
        usage_tail(usage, id, "text_completion", created, model, per_prompt));
    return;
  }
  respond_when_done(std::move(call), res, [=](const std::vector<RequestOutput>& outs) {
    json choices = json::array();
    for (size_t i = 0; i < outs.size(); ++i) {
      const auto& r = shared->requests[i];
      choices.push_back({{"index", i},
                         {"text", echo ? texts[i / per_prompt] + outs[i].text : outs[i].text},
                         {"logprobs", r.return_logprob ? completion_logprobs(outs[i], r, tok) : json(nullptr)},
                         {"finish_reason", finish_reason_of(outs[i])},
                         {"matched_stop", matched_stop(outs[i])}});
    }
    json j = {{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model},
              {"choices", choices}, {"usage", usage_of(outs, per_prompt)}};
    return dump_json(j);
  });
}

void EngineServer::on_chat_completions(const Req& req, Res& res) {
  const json body = parse_json_body(req);
  if (!body.is_object()) throw BadRequest("request body: expected a JSON object");
  const model::Tokenizer* tok = engine_->tokenizer();
  if (!tok) throw BadRequest("messages: the model has no tokenizer, so chat is unavailable", "use /generate with input_ids");
  if (!tok->chat_template())
    throw BadRequest("messages: the model's tokenizer_config.json has no chat_template",
                     "use /v1/completions or /generate, or add a chat_template to tokenizer_config.json");
  // Keep the client's key order: templates render tool schemas with tojson.
  ojson obody = parse_json_body_ordered(req);
  auto m = obody.find("messages");
  if (m == obody.end() || !m->is_array() || m->empty()) throw BadRequest("messages: expected a non-empty list of messages");
  for (size_t i = 0; i < m->size(); ++i) normalize_message((*m)[i], "messages[" + std::to_string(i) + "]");
  ojson kwargs = ojson::object();
  if (auto k = obody.find("chat_template_kwargs"); k != obody.end() && k->is_object())
    for (auto& [key, v] : k->items()) kwargs[key] = v;
  if (auto t = obody.find("tools"); t != obody.end() && !t->is_null()) kwargs["tools"] = *t;
  if (!kwargs.contains("add_generation_prompt")) kwargs["add_generation_prompt"] = true;
  std::string text;
  try {
    text = tok->apply_chat_template(*m, kwargs);
  } catch (const std::exception& e) {  // the template's error on the client's messages
    throw BadRequest(std::string("messages: the chat template failed: ") + e.what());
  }
  // The template already holds BOS and friends (transformers tokenizes its
  // output without special tokens).
  auto ids = tokenize(*engine_, text, "messages", false, limits_.max_text_bytes);

  const bool logprobs = body.value("logprobs", false);
  const int64_t top = opt_top_logprobs(body, "top_logprobs", limits_);
  if (top > 0 && !logprobs) throw BadRequest("top_logprobs: needs logprobs: true");
  GenerateCall call = openai_call(body, {ids}, {"messages", "max_tokens", "max_completion_tokens", "stream",
                                                "logprobs", "top_logprobs", "response_format"},
                                  logprobs, top, *engine_, limits_, false);
  if (pd_) pd_->attach(body, call);
  if (auto rf = body.find("response_format"); rf != body.end() && !rf->is_null() && rf->value("type", "") != "text")
    throw BadRequest("response_format: only {\"type\": \"text\"} is supported by rlhost");
  const std::string id = "chatcmpl-" + std::to_string(unix_seconds()) + "-" + std::to_string(reinterpret_cast<uintptr_t>(&req) & 0xffffff);
  const int64_t created = unix_seconds();
  const std::string model = model_name_of(call, metrics_name());
  const size_t per_prompt = call.requests.size();
  auto shared = std::make_shared<GenerateCall>(call);

  if (body.value("stream", false)) {
    for (auto& r : call.requests) r.stream = true;
    auto sent = std::make_shared<std::map<size_t, size_t>>();        // chars sent per choice
    auto sent_lp = std::make_shared<std::map<size_t, size_t>>();     // logprob positions sent
    auto started = std::make_shared<std::set<size_t>>();             // choices that got their role delta
    const bool usage = include_usage(body);
    respond_stream(
        std::move(call), res,
        [=](size_t i, const RequestOutput& out) {
          std::vector<std::string> chunks;
          auto chunk = [&](json delta, json lp, json finish) {
            json choice = {{"index", i}, {"delta", std::move(delta)}, {"logprobs", std::move(lp)}, {"finish_reason", finish}};
            if (!finish.is_null()) choice["matched_stop"] = matched_stop(out);
            chunks.push_back(dump_json(json{{"id", id}, {"object", "chat.completion.chunk"}, {"created", created},
                                  {"model", model}, {"choices", json::array({choice})}}));
          };
          if (started->insert(i).second) chunk({{"role", "assistant"}, {"content", ""}}, nullptr, nullptr);
          const std::string d = delta_of(out.text, (*sent)[i]);
          json lp = nullptr;
          const auto& r = shared->requests[i];
          if (r.return_logprob) {
            size_t& from = (*sent_lp)[i];
            if (out.output_logprobs.size() > from) {
              lp = chat_logprobs(out, r, tok, from, out.output_logprobs.size());
              from = out.output_logprobs.size();
            }
          }
          if (!d.empty() || !lp.is_null()) chunk({{"content", d}}, lp, nullptr);
          if (out.finished) chunk(json::object(), nullptr, finish_reason_of(out));
          return chunks;
        },
        usage_tail(usage, id, "chat.completion.chunk", created, model, per_prompt));
    return;
  }
  respond_when_done(std::move(call), res, [=](const std::vector<RequestOutput>& outs) {
    json choices = json::array();
    for (size_t i = 0; i < outs.size(); ++i) {
      const auto& r = shared->requests[i];
      choices.push_back({{"index", i},
                         {"message", {{"role", "assistant"}, {"content", outs[i].text}, {"reasoning_content", nullptr},
                                      {"tool_calls", nullptr}}},
                         {"logprobs", r.return_logprob ? chat_logprobs(outs[i], r, tok, 0, outs[i].output_ids.size()) : json(nullptr)},
                         {"finish_reason", finish_reason_of(outs[i])},
                         {"matched_stop", matched_stop(outs[i])}});
    }
    json j = {{"id", id}, {"object", "chat.completion"}, {"created", created}, {"model", model},
              {"choices", choices}, {"usage", usage_of(outs, per_prompt)}};
    return dump_json(j);
  });
}

void EngineServer::on_models(const Req&, Res& res) {
  json j = {{"object", "list"},
            {"data", json::array({json{{"id", metrics_name()},
                                       {"object", "model"},
                                       {"created", static_cast<int64_t>(start_time_)},
                                       {"owned_by", "rlhost"},
                                       {"root", opts_.model_path},
                                       {"max_model_len", engine_->context_length()}}})}};
  // LoRA adapters, as SGLang lists them: requests name them as model "<adapter>" or "<base>:<adapter>".
  for (const LoraInfo& a : engine_->lora_adapters())
    j["data"].push_back({{"id", a.name},
                         {"object", "model"},
                         {"created", static_cast<int64_t>(start_time_)},
                         {"owned_by", "rlhost"},
                         {"root", a.path},
                         {"parent", metrics_name()},
                         {"max_model_len", engine_->context_length()}});
  res.set_content(dump_json(j), "application/json");
}

}  // namespace rl::engine
