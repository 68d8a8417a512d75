// rl.engine's native half (in librlhost_torch.so): an in-process engine with
// its HTTP server, and the few process helpers process mode needs.
//
//   start(opts) -> handle | nil, err
//   handle:url()                 "" when started with serve = false
//   handle:generate(json) -> op  events: ("done", json) | ("error", msg)
//   handle:control(what, json) -> op   flush_cache | update_weights_from_disk |
//                                release_memory | resume_memory; ("done", json) | ("error", msg)
//   handle:abort(rid) / handle:abort_all() / handle:stats() -> json / handle:stop()
//   handle:stop_background() -> stopped()   stops on a thread of its own; the
//                                returned flag reads true once it is stopped
//   handle:stall(seconds)        fault drill: the scheduler sleeps that long
//                                between two steps (a stuck engine)
//   defaults() -> json   the C++ defaults of the options lua/rl/engine/options.lua declares
//   forward_sigterm()   (process mode spawns through _core.process.spawn)
//
// Engine callbacks run on the scheduler thread: they only post to the loop,
// and the loop side delivers to Lua (never Lua from another thread). Control
// calls wait for the scheduler, so they run on a helper thread and complete as
// ops too; the Lua task yields meanwhile and the loop keeps serving.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/live_objects.hpp"
#include "bindings/host_context.hpp"
#include "bindings/torch_module.hpp"
#include "bindings/trampoline.hpp"
#include "engine/engine.hpp"
#include "engine/generate_api.hpp"
#include "engine/server.hpp"
#include "model/config.hpp"
#include "model/tokenizer.hpp"

namespace rl::lua {
namespace {

using nlohmann::json;

const char kEngineMt = 0;

struct EngineBox : LiveObject {
  std::shared_ptr<engine::Engine> engine;
  std::unique_ptr<engine::EngineServer> server;
  engine::CallLimits limits;  // what one :generate call may ask for (the server's own)
  std::shared_ptr<std::atomic<bool>> alive = std::make_shared<std::atomic<bool>>(true);
  struct Helper {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Helper> helpers;  // control calls in flight; finished ones joined as we go, all by stop()

  void join_finished() {
    for (auto it = helpers.begin(); it != helpers.end();) {
      if (it->done->load()) {
        it->thread.join();
        it = helpers.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Stops the server, the engine and the helper threads, in that order, and frees them.
  static void stop_parts(std::unique_ptr<engine::EngineServer>& srv, std::shared_ptr<engine::Engine>& eng,
                         std::vector<Helper>& hs) {
    if (srv) srv->stop();
    if (eng) eng->stop();
    for (auto& h : hs)
      if (h.thread.joinable()) h.thread.join();
    hs.clear();
    srv.reset();
    eng.reset();
  }

  void stop() {
    alive->store(false);  // posted completions become no-ops
    stop_parts(server, engine, helpers);
  }

  // stop() on a detached thread that owns the parts: a stuck engine (its
  // scheduler or loop never returns) costs that thread, never the caller.
  std::shared_ptr<std::atomic<bool>> stop_background() {
    alive->store(false);
    auto stopped = std::make_shared<std::atomic<bool>>(false);
    std::thread([srv = std::move(server), eng = std::move(engine), hs = std::move(helpers), stopped]() mutable {
      stop_parts(srv, eng, hs);
      stopped->store(true);
    }).detach();
    helpers.clear();
    return stopped;
  }
};

EngineBox& check_box(lua_State* L, int idx) {
  auto* box = static_cast<EngineBox*>(check_udata(L, idx, &kEngineMt, "engine", "rl.engine handle"));
  if (!box->engine) throw ArgError(idx, "engine", "the engine was stopped");
  return *box;
}

std::optional<std::string> opt_str(lua_State* L, int t, const char* key) {
  auto v = arg::field_string(L, t, key, "opts");
  return v ? std::optional<std::string>(std::string(*v)) : std::nullopt;
}

int64_t opt_int(lua_State* L, int t, const char* key, int64_t dflt, int64_t lo) {
  auto v = arg::field_integer(L, t, key, "opts");
  if (v && *v < lo) throw ArgError(0, std::string("opts.") + key, "integer >= " + std::to_string(lo) + " expected");
  return v.value_or(dflt);
}

// opts.<key>: a list of strings (absent: empty).
std::vector<std::string> opt_string_list(lua_State* L, int t, const char* key) {
  std::vector<std::string> out;
  lua_getfield(L, t, key);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return out;
  }
  if (!lua_istable(L, -1)) {
    lua_pop(L, 1);
    throw ArgError(0, std::string("opts.") + key, "a list of strings expected");
  }
  const int n = static_cast<int>(lua_objlen(L, -1));
  for (int i = 1; i <= n; ++i) {
    lua_rawgeti(L, -1, i);
    if (lua_type(L, -1) != LUA_TSTRING) {
      lua_pop(L, 2);
      throw ArgError(0, std::string("opts.") + key + "[" + std::to_string(i) + "]", "a string expected");
    }
    size_t len = 0;
    const char* v = lua_tolstring(L, -1, &len);
    out.emplace_back(v, len);
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return out;
}

// start(opts) -> handle | nil, err
int l_start(lua_State* L) {
  arg::table(L, 1, "opts");
  engine::EngineOptions eo;
  auto model = opt_str(L, 1, "model");
  if (!model) throw ArgError(0, "opts.model", "a model directory (or .gguf file) expected, got nil");
  eo.model = *model;
  if (auto v = opt_str(L, 1, "tokenizer")) eo.tokenizer = *v;
  if (auto v = opt_str(L, 1, "served_model_name")) eo.served_model_name = *v;
  if (auto v = opt_str(L, 1, "dtype")) eo.dtype = *v;
  if (auto v = opt_str(L, 1, "device")) eo.device = *v;
  if (auto v = opt_str(L, 1, "weight_version")) eo.weight_version = *v;
  eo.max_running_requests = opt_int(L, 1, "max_running_requests", eo.max_running_requests, 1);
  eo.kv_cache_tokens = opt_int(L, 1, "kv_cache_tokens", eo.kv_cache_tokens, 0);
  eo.kv_cache_bytes = opt_int(L, 1, "kv_cache_bytes", eo.kv_cache_bytes, 1);
  eo.block_size = opt_int(L, 1, "block_size", eo.block_size, 1);
  eo.max_prefill_tokens = opt_int(L, 1, "max_prefill_tokens", eo.max_prefill_tokens, 1);
  eo.context_length = opt_int(L, 1, "context_length", eo.context_length, 0);
  eo.threads = static_cast<int>(opt_int(L, 1, "threads", eo.threads, 0));
  if (auto v = arg::field_boolean(L, 1, "enable_prefix_cache", "opts")) eo.enable_prefix_cache = *v;
  eo.cuda_graph_max_bs = opt_int(L, 1, "cuda_graph_max_bs", eo.cuda_graph_max_bs, 0);
  if (auto v = arg::field_boolean(L, 1, "disable_cuda_graph", "opts")) eo.disable_cuda_graph = *v;
  if (auto v = opt_str(L, 1, "overlap_schedule")) eo.overlap_schedule = *v;
  if (auto v = arg::field_boolean(L, 1, "recompute_kv_on_weight_update", "opts")) eo.recompute_kv_on_weight_update = *v;
  eo.lora_paths = opt_string_list(L, 1, "lora_paths");
  eo.max_loras_per_batch = opt_int(L, 1, "max_loras_per_batch", eo.max_loras_per_batch, 1);
  eo.max_lora_rank = opt_int(L, 1, "max_lora_rank", eo.max_lora_rank, 0);
  const bool serve = arg::field_boolean(L, 1, "serve", "opts").value_or(true);
  engine::ServerOptions so;
  if (auto v = opt_str(L, 1, "host")) so.host = *v;
  so.port = static_cast<int>(opt_int(L, 1, "port", 0, 0));
  if (so.port > 65535) throw ArgError(0, "opts.port", "integer 0-65535 expected");
  so.max_connections = static_cast<size_t>(opt_int(L, 1, "max_connections", static_cast<int64_t>(so.max_connections), 1));
  so.max_sequences_per_request = opt_int(L, 1, "max_sequences_per_request", so.max_sequences_per_request, 0);
  so.max_queued_requests = opt_int(L, 1, "max_queued_requests", so.max_queued_requests, 0);
  so.max_tokens_in_flight = opt_int(L, 1, "max_tokens_in_flight", so.max_tokens_in_flight, 0);
  so.max_top_logprobs = opt_int(L, 1, "max_top_logprobs", so.max_top_logprobs, 0);
  so.max_response_entries = opt_int(L, 1, "max_response_entries", so.max_response_entries, 0);
  if (auto v = opt_str(L, 1, "api_key")) so.api_key = *v;
  if (auto v = opt_str(L, 1, "disaggregation_mode")) so.pd.mode = *v;
  so.pd.bootstrap_port = static_cast<int>(opt_int(L, 1, "disaggregation_bootstrap_port", 0, 0));
  if (so.pd.bootstrap_port > 65535) throw ArgError(0, "opts.disaggregation_bootstrap_port", "integer 0-65535 expected");
  so.pd.bootstrap_host = so.host;
  if (auto v = opt_str(L, 1, "disaggregation_transfer_backend")) so.pd.transfer_backend = *v;
  if (auto v = arg::field_number(L, 1, "disaggregation_transfer_timeout", "opts")) so.pd.transfer_timeout_s = *v;
  if (auto v = arg::field_boolean(L, 1, "disaggregation_kv_checksum", "opts")) so.pd.kv_checksum = *v;
  if (auto v = opt_str(L, 1, "server_args")) {
    try {
      so.server_args = json::parse(*v);
    } catch (const std::exception& e) {
      throw ArgError(0, "opts.server_args", std::string("JSON object text expected: ") + e.what());
    }
  }

  std::string error;
  std::shared_ptr<engine::Engine> eng;
  std::unique_ptr<engine::EngineServer> srv;
  try {
    eng = std::shared_ptr<engine::Engine>(engine::Engine::create(eo));
    // Ids the tokenizer makes that the model has no embedding row for would fail later,
    // in a step: a tokenizer with more tokens than the model is refused at the start.
    if (const auto* tok = eng->tokenizer(); tok && tok->vocab_size() > eng->config().vocab_size)
      throw rl::Error("engine: the tokenizer " + tok->source() + " has " + std::to_string(tok->vocab_size()) +
                      " tokens, more than the model's vocab_size " + std::to_string(eng->config().vocab_size) +
                      " (config.json)",
                  "the tokenizer of another model? pass the model's own (--tokenizer / opts.tokenizer)");
    if (serve) srv = std::make_unique<engine::EngineServer>(eng, so);
  } catch (const std::exception& e) {
    error = e.what();
    if (eng) eng->stop();
  }
  if (!error.empty()) {
    srv.reset();
    eng.reset();
    return fail(L, error);
  }
  void* mem = lua_newuserdata(L, sizeof(EngineBox));
  auto* box = new (mem) EngineBox();
  box->limits.max_sequences = so.max_sequences_per_request;
  box->limits.max_top_logprobs = so.max_top_logprobs;
  box->limits.max_response_entries = so.max_response_entries;
  box->limits.max_text_bytes = engine::text_bytes_bound(*eng);
  box->engine = std::move(eng);
  box->server = std::move(srv);
  registry_get(L, &kEngineMt);
  lua_setmetatable(L, -2);
  return 1;
}

int l_url(lua_State* L) {
  EngineBox& box = check_box(L, 1);
  const std::string u = box.server ? box.server->url() : std::string();
  lua_pushlstring(L, u.data(), u.size());
  return 1;
}

// generate(json) -> op | nil, err (a bad request is the caller's data, not misuse)
int l_generate(lua_State* L) {
  EngineBox& box = check_box(L, 1);
  const std::string text(arg::string(L, 2, "request"));
  std::string error;
  engine::GenerateCall call;
  try {
    call = engine::parse_generate(json::parse(text), *box.engine, box.limits);
  } catch (const json::parse_error& e) {
    error = std::string("request: malformed JSON (") + e.what() + ")";
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!error.empty()) return fail(L, error);

  HostContext& ctx = HostContext::get(L);
  const uint64_t op = ctx.new_op();
  HostContext* c = &ctx;
  auto alive = box.alive;
  const model::Tokenizer* tok = box.engine->tokenizer();
  // Set once start() returns; read on the loop thread after the last update,
  // which cannot run before this function returns (same thread).
  auto holder = std::make_shared<std::shared_ptr<engine::GenerateRun>>();
  auto listener = [c, alive, op, holder, tok](size_t, const engine::RequestOutput&, bool last) {
    if (!last) return;
    c->loop().post([c, alive, op, holder, tok] {
      auto run = std::move(*holder);  // breaks the run -> listener -> holder cycle
      if (!alive->load() || !run) return;
      const std::string body = engine::dump_json(engine::response_json(run->outputs(), run->call(), tok));
      c->deliver(op, [&](lua_State* S) {
        lua_pushliteral(S, "done");
        lua_pushlstring(S, body.data(), body.size());
        return 2;
      }, true);
    });
  };
  try {
    *holder = box.server ? box.server->start_run(std::move(call), listener)
                         : engine::GenerateRun::start(*box.engine, std::move(call), listener);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!error.empty()) {
    ctx.cancel(op);
    return fail(L, error);
  }
  std::weak_ptr<engine::GenerateRun> weak = *holder;
  ctx.set_cancel(op, [weak] {  // the waiting task was cancelled: stop generating
    if (auto r = weak.lock()) r->abort();
  });
  lua_pushnumber(L, static_cast<lua_Number>(op));
  return 1;
}

// control(what, json_args) -> op: runs a blocking engine control call on a
// helper thread and completes with ("done", result_json) or ("error", msg).
int l_control(lua_State* L) {
  EngineBox& box = check_box(L, 1);
  const std::string what(arg::string(L, 2, "what"));
  const std::string args_text(arg::opt_string(L, 3, "args").value_or("{}"));
  json args;
  try {
    args = json::parse(args_text);
  } catch (const std::exception& e) {
    throw ArgError(3, "args", std::string("JSON text expected: ") + e.what());
  }
  std::vector<std::string> tags;
  if (args.contains("tags"))
    for (const auto& t : args["tags"]) tags.push_back(t.get<std::string>());
  std::function<json()> fn;
  auto eng = box.engine;
  if (what == "flush_cache") {
    fn = [eng] { return json{{"success", eng->flush_cache()}}; };
  } else if (what == "update_weights_from_disk") {
    if (!args.contains("model_path") || !args["model_path"].is_string())
      throw ArgError(3, "args", "model_path (string) expected");
    const std::string dir = args["model_path"].get<std::string>();
    std::optional<std::string> version;
    if (args.contains("weight_version") && args["weight_version"].is_string()) version = args["weight_version"].get<std::string>();
    fn = [eng, dir, version] {
      eng->update_weights_from_disk(dir, version);
      return json{{"success", true}, {"weight_version", eng->weight_version()}};
    };
  } else if (what == "load_lora_adapter" || what == "unload_lora_adapter") {
    if (!args.contains("lora_name") || !args["lora_name"].is_string())
      throw ArgError(3, "args", "lora_name (string) expected");
    const std::string name = args["lora_name"].get<std::string>();
    if (what == "unload_lora_adapter") {
      fn = [eng, name] {
        eng->unload_lora_adapter(name);
        return json{{"success", true}};
      };
    } else {
      if (!args.contains("lora_path") || !args["lora_path"].is_string())
        throw ArgError(3, "args", "lora_path (string) expected");
      const std::string dir = args["lora_path"].get<std::string>();
      std::optional<std::string> version;
      if (args.contains("weight_version") && args["weight_version"].is_string())
        version = args["weight_version"].get<std::string>();
      fn = [eng, name, dir, version] {
        const engine::LoraInfo info = eng->load_lora_adapter(name, dir, version);
        return json{{"success", true}, {"weight_version", info.version}};
      };
    }
  } else if (what == "release_memory") {
    fn = [eng, tags] { eng->release_memory(tags); return json{{"success", true}}; };
  } else if (what == "resume_memory") {
    fn = [eng, tags] { eng->resume_memory(tags); return json{{"success", true}}; };
  } else {
    throw ArgError(2, "what", "flush_cache, update_weights_from_disk, load_lora_adapter, unload_lora_adapter, "
                              "release_memory or resume_memory expected, got '" + what + "'");
  }
  HostContext& ctx = HostContext::get(L);
  const uint64_t op = ctx.new_op();
  HostContext* c = &ctx;
  auto alive = box.alive;
  box.join_finished();
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread t([c, alive, op, done, fn = std::move(fn)] {
    try {
      post_op_text(c, alive, op, true, fn().dump());
    } catch (const std::exception& e) {
      post_op_text(c, alive, op, false, e.what());
    }
    done->store(true);
  });
  box.helpers.push_back({std::move(t), done});
  lua_pushnumber(L, static_cast<lua_Number>(op));
  return 1;
}

int l_abort(lua_State* L) {
  EngineBox& box = check_box(L, 1);
  const std::string rid(arg::string(L, 2, "rid"));
  const int64_t n = box.server ? box.server->abort_rid(rid) : (box.engine->abort(rid) ? 1 : 0);
  lua_pushnumber(L, static_cast<lua_Number>(n));
  return 1;
}

// cancel_commands(): drops the control commands its scheduler has not taken (their
// callers get an error); the number dropped. For a stuck scheduler (rl.recipe.health).
int l_cancel_commands(lua_State* L) {
  lua_pushnumber(L, static_cast<lua_Number>(check_box(L, 1).engine->cancel_pending_commands()));
  return 1;
}

int l_abort_all(lua_State* L) {
  lua_pushnumber(L, static_cast<lua_Number>(check_box(L, 1).engine->abort_all()));
  return 1;
}

int l_stats(lua_State* L) {
  const std::string s = engine::stats_json(check_box(L, 1).engine->stats()).dump();
  lua_pushlstring(L, s.data(), s.size());
  return 1;
}

// stop(drain_s?): with drain_s, the server first stops accepting and lets
// running requests finish for up to that long (blocks this thread meanwhile).
int l_stop(lua_State* L) {
  auto* box = static_cast<EngineBox*>(check_udata(L, 1, &kEngineMt, "engine", "rl.engine handle"));
  const double drain = arg::opt_number(L, 2, "drain").value_or(0);
  if (drain > 0 && box->server) box->server->drain(drain);
  box->stop();
  return 0;
}

// stop_background() -> a function that returns true once the engine stopped.
int l_stop_background(lua_State* L) {
  auto* box = static_cast<EngineBox*>(check_udata(L, 1, &kEngineMt, "engine", "rl.engine handle"));
  auto stopped = box->stop_background();
  using Flag = std::shared_ptr<std::atomic<bool>>;
  new (lua_newuserdata(L, sizeof(Flag))) Flag(std::move(stopped));
  lua_newtable(L);
  lua_pushcfunction(L, [](lua_State* L) -> int {
    static_cast<Flag*>(lua_touserdata(L, 1))->~Flag();
    return 0;
  });
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  lua_pushcclosure(L, [](lua_State* L) -> int {
    lua_pushboolean(L, (*static_cast<Flag*>(lua_touserdata(L, lua_upvalueindex(1))))->load());
    return 1;
  }, 1);
  return 1;
}

// stall(seconds): a fault drill for thread-mode engines, what SIGSTOP is to a
// process: the scheduler sleeps `seconds` between two steps.
int l_stall(lua_State* L) {
  EngineBox& box = check_box(L, 1);
  const double s = arg::number(L, 2, "seconds");
  if (!(s >= 0)) throw ArgError(2, "seconds", "a number >= 0 expected");
  const auto d = std::chrono::duration<double>(s);
  box.join_finished();
  auto done = std::make_shared<std::atomic<bool>>(false);
  auto eng = box.engine;
  std::thread t([eng, d, done] {
    try {
      eng->run_between_steps([d] { std::this_thread::sleep_for(d); });
    } catch (const std::exception&) {
    }
    done->store(true);
  });
  box.helpers.push_back({std::move(t), done});
  return 0;
}

int l_gc(lua_State* L) {
  if (auto* p = static_cast<EngineBox*>(lua_touserdata(L, 1))) {
    p->stop();
    p->~EngineBox();
  }
  return 0;
}

// defaults() -> json: the C++ defaults of every engine and server option rl.engine declares
// (lua/rl/engine/options.lua holds the same values; tests/lua/engine_spec.lua compares them).
int l_defaults(lua_State* L) {
  const engine::EngineOptions eo;
  const engine::ServerOptions so;
  const json j = {{"dtype", eo.dtype},
                  {"max_running_requests", eo.max_running_requests},
                  {"kv_cache_tokens", eo.kv_cache_tokens},
                  {"kv_cache_bytes", eo.kv_cache_bytes},
                  {"block_size", eo.block_size},
                  {"max_prefill_tokens", eo.max_prefill_tokens},
                  {"context_length", eo.context_length},
                  {"threads", eo.threads},
                  {"enable_prefix_cache", eo.enable_prefix_cache},
                  {"weight_version", eo.weight_version},
                  {"cuda_graph_max_bs", eo.cuda_graph_max_bs},
                  {"disable_cuda_graph", eo.disable_cuda_graph},
                  {"overlap_schedule", eo.overlap_schedule},
                  {"recompute_kv_on_weight_update", eo.recompute_kv_on_weight_update},
                  {"max_loras_per_batch", eo.max_loras_per_batch},
                  {"max_lora_rank", eo.max_lora_rank},
                  {"host", so.host},
                  {"port", so.port},
                  {"max_connections", so.max_connections},
                  {"max_sequences_per_request", so.max_sequences_per_request},
                  {"max_queued_requests", so.max_queued_requests},
                  {"max_tokens_in_flight", so.max_tokens_in_flight},
                  {"max_top_logprobs", so.max_top_logprobs},
                  {"max_response_entries", so.max_response_entries},
                  {"disaggregation_mode", so.pd.mode},
                  {"disaggregation_bootstrap_port", so.pd.bootstrap_port},
                  {"disaggregation_transfer_backend", so.pd.transfer_backend},
                  {"disaggregation_transfer_timeout", so.pd.transfer_timeout_s},
                  {"disaggregation_kv_checksum", so.pd.kv_checksum}};
  const std::string s = j.dump();
  lua_pushlstring(L, s.data(), s.size());
  return 1;
}

// ---- process helpers (rlhost engine) -------------------------------------------------

void on_sigterm(int) { ::kill(::getpid(), SIGINT); }  // async-signal-safe

// SIGTERM behaves like Ctrl-C (the host cancels the main task, which cleans
// up): `rlhost engine` under a supervisor stops gracefully.
int l_forward_sigterm(lua_State* L) {
  struct sigaction sa {};
  sa.sa_handler = on_sigterm;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  return 0;
}

}  // namespace

std::shared_ptr<engine::Engine> engine_from(lua_State* L, int idx) { return check_box(L, idx).engine; }

void open_engine(lua_State* L, int t) {
  static const Reg methods[] = {
      {"url", entry<l_url>},         {"generate", entry<l_generate>}, {"control", entry<l_control>},
      {"abort", entry<l_abort>},     {"abort_all", entry<l_abort_all>}, {"stats", entry<l_stats>},
      {"stop", entry<l_stop>},
      {"stop_background", entry<l_stop_background>},
      {"stall", entry<l_stall>},
      {"cancel_commands", entry<l_cancel_commands>},
  };
  make_metatable(L, &kEngineMt, "rl.engine.Engine:", methods, std::size(methods), entry<l_gc>);
  static const Reg regs[] = {
      {"start", entry<l_start>}, {"forward_sigterm", entry<l_forward_sigterm>}, {"defaults", entry<l_defaults>},
  };
  register_functions(L, t, "rl.engine.", regs);
}

}  // namespace rl::lua
