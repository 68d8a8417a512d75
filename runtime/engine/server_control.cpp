// Control endpoints: /flush_cache, /abort_request, /update_weights_from_disk,
// /release_memory_occupation, /resume_memory_occupation, /start_profile,
// /stop_profile. All need the API key when the server has one (server.cpp).
#include "base/log_text.hpp"
#include "base/json_input.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "engine/server.hpp"
#include "profile/torch_profiler.hpp"

namespace rl::engine {
namespace {

using nlohmann::json;

std::optional<std::string> opt_string(const json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) throw BadRequest(std::string(key) + ": expected a string, got " + json_input::brief(*it));
  return it->get<std::string>();
}

std::optional<bool> opt_bool(const json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) throw BadRequest(std::string(key) + ": expected true or false, got " + json_input::brief(*it));
  return it->get<bool>();
}

std::vector<std::string> string_list(const json& body, const char* key, const std::vector<std::string>& allowed) {
  std::vector<std::string> out;
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return out;
  if (!it->is_array()) throw BadRequest(std::string(key) + ": expected a list of strings, got " + json_input::brief(*it));
  for (const auto& v : *it) {
    if (!v.is_string()) throw BadRequest(std::string(key) + ": expected strings, got " + json_input::brief(v));
    std::string s = v.get<std::string>();
    if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), s) == allowed.end()) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      throw BadRequest(std::string(key) + ": unknown value '" + json_input::excerpt(s) + "'", "known: " + list);
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

void EngineServer::on_flush_cache(const Req&, Res& res) {
  if (!engine_->flush_cache()) {
    reply_json(res, 400, error_json(400, "flush_cache: requests are running or queued; the cache was not flushed "
                                    "(hint: retry when /v1/loads shows none, or abort them first)"));
    return;
  }
  res.status = 200;
  res.set_content("Cache flushed.\n", "text/plain; charset=utf-8");
}

// {"rid": "..."} or {"abort_all": true}. Aborted requests finish with
// finish_reason {"type": "abort"} and keep the tokens generated so far.
void EngineServer::on_abort_request(const Req& req, Res& res) {
  const json body = parse_json_body(req, true);
  const bool all = opt_bool(body, "abort_all").value_or(false);
  const auto rid = opt_string(body, "rid");
  if (!all && !rid) throw BadRequest("abort_request: give 'rid' or 'abort_all': true");
  int64_t n = 0;
  if (all) n = engine_->abort_all();
  else n = abort_rid(*rid);
  reply_json(res, 200, {{"success", true}, {"aborted", n}});
}

// {"model_path": DIR, "weight_version"?: "...", "lora_name"?: NAME}: SGLang's in-place reload. A
// bad directory (missing files, shape mismatch) is the caller's error: 400
// with success false; the old weights stay in use.
void EngineServer::on_update_weights_from_disk(const Req& req, Res& res) {
  const json body = parse_json_body(req);
  const auto path = opt_string(body, "model_path");
  if (!path || path->empty()) throw BadRequest("update_weights_from_disk: 'model_path' is required");
  const auto version = opt_string(body, "weight_version");
  if (auto lf = opt_string(body, "load_format"); lf && *lf != "auto" && *lf != "safetensors")
    throw BadRequest("load_format: '" + *lf + "' is not supported", "use auto or safetensors");
  // rlhost's extension: with lora_name, model_path is a PEFT directory that replaces (or
  // adds) that LoRA adapter, the base weights untouched (a trainer's adapter sync).
  if (const auto lora = opt_string(body, "lora_name")) {
    LoraInfo info;
    try {
      info = engine_->load_lora_adapter(*lora, *path, version);
    } catch (const rl::Error& e) {
      reply_json(res, 400, {{"success", false}, {"message", e.what()}, {"num_paused_requests", 0}});
      return;
    }
    reply_json(res, 200, {{"success", true}, {"message", "Succeeded to update LoRA adapter '" + *lora + "'."},
                          {"lora_name", *lora}, {"weight_version", info.version}, {"num_paused_requests", 0}});
    return;
  }
  try {
    engine_->update_weights_from_disk(*path, version);
  } catch (const rl::Error& e) {
    reply_json(res, 400, {{"success", false}, {"message", e.what()}, {"num_paused_requests", 0}});
    return;
  }
  const std::string v = engine_->weight_version();
  log::info("engine server: weights updated from " + *path + " (version " + v + ")");
  reply_json(res, 200, {{"success", true},
                   {"message", "Succeeded to update model weights."},
                   {"weight_version", v},
                   {"num_paused_requests", 0}});
}

void EngineServer::on_release_memory(const Req& req, Res& res) {
  const json body = parse_json_body(req, true);
  const auto tags = string_list(body, "tags", {"kv_cache", "weights"});
  engine_->release_memory(tags);
  reply_json(res, 200, {{"success", true}, {"message", "memory released"}});
}

void EngineServer::on_resume_memory(const Req& req, Res& res) {
  const json body = parse_json_body(req, true);
  const auto tags = string_list(body, "tags", {"kv_cache", "weights"});
  try {
    engine_->resume_memory(tags);
  } catch (const rl::Error& e) {
    reply_json(res, 400, {{"success", false}, {"message", e.what()}});
    return;
  }
  reply_json(res, 200, {{"success", true}, {"message", "memory resumed"}});
}

// ---- profiler --------------------------------------------------------------------------

// Scheduler thread: stop the running profile, remember the file or the error.
void EngineServer::finish_profile_on_engine_thread() {
  if (!profiler_ || !profiler_->running()) return;
  std::string path, error;
  try {
    path = profiler_->stop().string();
  } catch (const std::exception& e) {
    error = e.what();
  }
  std::lock_guard lk(prof_state_mu_);
  if (!path.empty()) {
    prof_paths_.push_back(path);
    log::info("engine server: profile written to " + path);
  } else {
    prof_error_ = error;
    log::text(log::Level::error, "engine server: writing the profile failed: " + error);
  }
}

// SGLang's /start_profile body: output_dir (default $SGLANG_TORCH_PROFILER_DIR
// or /tmp), num_steps (auto-stop after that many engine steps; absent: until
// /stop_profile), activities (CPU, GPU, MEM), with_stack, record_shapes,
// profile_by_stage (accepted; one trace covers prefill and decode, see docs).
void EngineServer::on_start_profile(const Req& req, Res& res) {
  const json body = parse_json_body(req, true);
  profile::ProfileOptions po;
  const char* env_dir = std::getenv("SGLANG_TORCH_PROFILER_DIR");
  po.output_dir = opt_string(body, "output_dir").value_or(env_dir && *env_dir ? env_dir : "/tmp");
  int64_t steps = 0;
  if (auto it = body.find("num_steps"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() <= 0)
      throw BadRequest("num_steps: expected a positive integer, got " + json_input::brief(*it));
    steps = it->get<int64_t>();
  }
  auto acts = string_list(body, "activities", {"CPU", "GPU", "CUDA", "MEM", "RPD"});
  if (!acts.empty()) po.activities = acts;
  po.with_stack = opt_bool(body, "with_stack").value_or(false);
  po.record_shapes = opt_bool(body, "record_shapes").value_or(false);
  const bool by_stage = opt_bool(body, "profile_by_stage").value_or(false);
  po.file_prefix = opt_string(body, "profile_id").value_or("rlhost");
  // The trace goes to output_dir/<profile_id>-<ms>.trace.json.gz: the id must
  // not climb out of output_dir ("../x") or name another folder ("a/b").
  const bool plain = !po.file_prefix.empty() && po.file_prefix.size() <= 128 && po.file_prefix[0] != '.' &&
                     std::all_of(po.file_prefix.begin(), po.file_prefix.end(), [](unsigned char c) {
                       return std::isalnum(c) || c == '-' || c == '_' || c == '.';
                     });
  if (!plain)
    throw BadRequest("profile_id: expected a plain name (letters, digits, '-', '_', '.'; at most 128, not starting "
                     "with '.'); it becomes the trace file's prefix inside output_dir");

  std::lock_guard lk(prof_mu_);
  if (!prof_hook_installed_) {
    // Auto-stop: counts engine steps on the scheduler thread, never blocks.
    engine_->set_step_hook([this] {
      if (prof_steps_left_.load() > 0 && --prof_steps_left_ == 0) finish_profile_on_engine_thread();
    });
    prof_hook_installed_ = true;
  }
  std::string error;
  engine_->run_between_steps([&] {
    if (!profiler_) profiler_ = std::make_unique<profile::TorchProfiler>();
    try {
      profiler_->start(po);
      prof_steps_left_ = steps;
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  if (!error.empty()) throw BadRequest(error);
  {
    std::lock_guard sk(prof_state_mu_);
    prof_error_.clear();
  }
  reply_json(res, 200, {{"success", true},
                   {"message", "Start profiling." + std::string(by_stage ? " (profile_by_stage: one trace holds both stages)" : "")},
                   {"output_dir", po.output_dir.string()},
                   {"num_steps", steps > 0 ? json(steps) : json(nullptr)}});
}

// Stops a running profile and returns the trace path; after an auto-stop
// (num_steps) it returns the file that wrote.
void EngineServer::on_stop_profile(const Req&, Res& res) {
  std::lock_guard lk(prof_mu_);
  bool was_running = false;
  engine_->run_between_steps([&] {
    was_running = profiler_ && profiler_->running();
    prof_steps_left_ = 0;
    finish_profile_on_engine_thread();
  });
  std::lock_guard sk(prof_state_mu_);
  if (!prof_error_.empty()) {
    const std::string e = prof_error_;
    prof_error_.clear();
    reply_json(res, 500, error_json(500, "stop_profile: " + e));
    return;
  }
  if (!was_running && prof_paths_.empty())
    throw BadRequest("stop_profile: no profile is running", "POST /start_profile first");
  reply_json(res, 200, {{"success", true},
                   {"message", was_running ? "Stop profiling." : "The profile had already stopped after num_steps."},
                   {"path", prof_paths_.empty() ? json(nullptr) : json(prof_paths_.back())},
                   {"paths", prof_paths_}});
}

}  // namespace rl::engine
