// rl._core.router: the router (runtime/router/) for lua/rl/router.lua.
//
//   _core.router.start(opts) -> handle | nil, err     an in-process router on its own thread
//   handle:url() / :port() / :add(url[, {worker_type, bootstrap_port}]) / :remove(key) / :workers() / :metrics() / :stop()
//   _core.router.policies() -> {names};  _core.router.defaults() -> json (the options' C++ defaults)
//   (child processes, process-mode routers included: _core.process, bindings/core_process.cpp)
//
// The Router's methods are thread-safe (they post to its loop and wait), so
// these calls are plain synchronous calls from the Lua loop; each takes
// microseconds.
#include <csignal>
#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "base/admin_token.hpp"
#include "base/child_process.hpp"
#include "base/live_objects.hpp"
#include "bindings/core_module.hpp"
#include "bindings/trampoline.hpp"
#include "router/router.hpp"

namespace rl::lua {

namespace {

const char kRouterMt = 0;

struct RouterBox : LiveObject {
  std::unique_ptr<router::Router> router;
};

RouterBox& check_router(lua_State* L, int idx) {
  auto* b = static_cast<RouterBox*>(check_udata(L, idx, &kRouterMt, "router", "rl.router handle"));
  if (!b->router) throw ArgError(idx, "router", "router already stopped");
  return *b;
}

double opt_positive(lua_State* L, int t, const char* key, double dflt) {
  auto v = arg::field_number(L, t, key, "opts");
  if (!v) return dflt;
  if (!(*v > 0)) {
    char got[32];
    std::snprintf(got, sizeof got, "%g", *v);
    throw ArgError(0, std::string("opts.") + key, std::string("a number > 0 expected, got ") + got);
  }
  return *v;
}

int opt_int(lua_State* L, int t, const char* key, int dflt, int lo, int hi) {
  auto v = arg::field_integer(L, t, key, "opts");
  if (!v) return dflt;
  if (*v < lo || *v > hi)
    throw ArgError(0, std::string("opts.") + key,
                   "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "] expected, got " + std::to_string(*v));
  return static_cast<int>(*v);
}

std::string check_policy(const std::string& field, std::string_view name) {
  std::string valid;
  for (auto& n : router::policy_names()) {
    if (n == name) return std::string(name);
    valid += (valid.empty() ? "" : ", ") + n;
  }
  throw ArgError(0, field, "unknown policy '" + std::string(name) + "'; valid: " + valid);
}

// PD mode: pd_disaggregation, prefill = {URL or {url = URL, bootstrap_port = N}, ...},
// decode = {URL, ...}, prefill_policy, decode_policy (lua/rl/router/options.lua).
void read_pd_options(lua_State* L, int t, router::RouterOptions& o) {
  if (auto v = arg::field_boolean(L, t, "pd_disaggregation", "opts")) o.pd_disaggregation = *v;
  if (auto v = arg::field_string(L, t, "prefill_policy", "opts")) o.prefill_policy = check_policy("opts.prefill_policy", *v);
  if (auto v = arg::field_string(L, t, "decode_policy", "opts")) o.decode_policy = check_policy("opts.decode_policy", *v);
  lua_getfield(L, t, "prefill");
  if (!lua_isnil(L, -1)) {
    if (!lua_istable(L, -1))
      throw ArgError(0, "opts.prefill", std::string("list of URLs or {url = URL, bootstrap_port = N} expected, got ") +
                                            arg::type_name(L, -1));
    const int n = static_cast<int>(lua_objlen(L, -1));
    for (int i = 1; i <= n; ++i) {
      const std::string field = "opts.prefill[" + std::to_string(i) + "]";
      lua_rawgeti(L, -1, i);
      router::RouterOptions::PrefillWorker p;
      if (lua_type(L, -1) == LUA_TSTRING) {
        p.url = lua_tostring(L, -1);
      } else if (lua_istable(L, -1)) {
        const int e = lua_gettop(L);
        auto url = arg::field_string(L, e, "url", field.c_str());
        if (!url) throw ArgError(0, field + ".url", "URL string expected, got nil");
        p.url = std::string(*url);
        if (auto port = arg::field_integer(L, e, "bootstrap_port", field.c_str())) {
          if (*port < 1 || *port > 65535)
            throw ArgError(0, field + ".bootstrap_port", "an integer 1-65535 expected, got " + std::to_string(*port));
          p.bootstrap_port = static_cast<int>(*port);
        }
      } else {
        throw ArgError(0, field, std::string("URL string or {url = URL, bootstrap_port = N} expected, got ") +
                                     arg::type_name(L, -1));
      }
      o.prefill.push_back(std::move(p));
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
  lua_getfield(L, t, "decode");
  if (!lua_isnil(L, -1)) {
    if (!lua_istable(L, -1))
      throw ArgError(0, "opts.decode", std::string("list of URLs expected, got ") + arg::type_name(L, -1));
    const int n = static_cast<int>(lua_objlen(L, -1));
    for (int i = 1; i <= n; ++i) {
      lua_rawgeti(L, -1, i);
      if (lua_type(L, -1) != LUA_TSTRING)
        throw ArgError(0, "opts.decode[" + std::to_string(i) + "]", std::string("URL string expected, got ") + arg::type_name(L, -1));
      o.decode.emplace_back(lua_tostring(L, -1));
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
}

router::RouterOptions read_options(lua_State* L, int t) {
  router::RouterOptions o;
  if (auto v = arg::field_string(L, t, "host", "opts")) o.host = std::string(*v);
  o.port = opt_int(L, t, "port", 0, 0, 65535);
  if (auto v = arg::field_boolean(L, t, "allow_remote", "opts")) o.allow_remote = *v;
  if (auto v = arg::field_boolean(L, t, "allow_link_local_workers", "opts")) o.allow_link_local_workers = *v;
  o.admin_token = admin_token();  // the run's: process-mode routers inherit it (base/admin_token.hpp)
  if (auto v = arg::field_string(L, t, "policy", "opts")) {
    o.policy = std::string(*v);
    bool known = false;
    std::string valid;
    for (auto& n : router::policy_names()) {
      known = known || n == o.policy;
      valid += (valid.empty() ? "" : ", ") + n;
    }
    if (!known) throw ArgError(0, "opts.policy", "unknown policy '" + o.policy + "'; valid: " + valid);
  }
  lua_getfield(L, t, "workers");
  if (!lua_isnil(L, -1)) {
    if (!lua_istable(L, -1))
      throw ArgError(0, "opts.workers", std::string("list of URLs expected, got ") + arg::type_name(L, -1));
    const int n = static_cast<int>(lua_objlen(L, -1));
    for (int i = 1; i <= n; ++i) {
      lua_rawgeti(L, -1, i);
      if (lua_type(L, -1) != LUA_TSTRING)
        throw ArgError(0, "opts.workers[" + std::to_string(i) + "]", std::string("URL string expected, got ") + arg::type_name(L, -1));
      o.workers.emplace_back(lua_tostring(L, -1));
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
  read_pd_options(L, t, o);
  o.health_interval_s = opt_positive(L, t, "health_interval", o.health_interval_s);
  o.health_timeout_s = opt_positive(L, t, "health_timeout", o.health_timeout_s);
  o.health_failure_threshold = opt_int(L, t, "health_failure_threshold", o.health_failure_threshold, 1, 1000);
  o.health_success_threshold = opt_int(L, t, "health_success_threshold", o.health_success_threshold, 1, 1000);
  if (auto v = arg::field_string(L, t, "health_path", "opts")) o.health_path = std::string(*v);
  o.max_retries = opt_int(L, t, "max_retries", o.max_retries, 0, 100);
  o.retry_backoff_s = opt_positive(L, t, "retry_backoff", o.retry_backoff_s);
  o.retry_max_backoff_s = opt_positive(L, t, "retry_max_backoff", o.retry_max_backoff_s);
  o.request_timeout_s = opt_positive(L, t, "request_timeout", o.request_timeout_s);
  o.connect_timeout_s = opt_positive(L, t, "connect_timeout", o.connect_timeout_s);
  o.breaker.failure_threshold = opt_int(L, t, "circuit_failure_threshold", o.breaker.failure_threshold, 1, 100000);
  o.breaker.success_threshold = opt_int(L, t, "circuit_success_threshold", o.breaker.success_threshold, 1, 100000);
  o.breaker.open_s = opt_positive(L, t, "circuit_open_time", o.breaker.open_s);
  if (auto v = arg::field_number(L, t, "cache_threshold", "opts")) {
    if (*v < 0 || *v > 1) throw ArgError(0, "opts.cache_threshold", "a number in [0, 1] expected");
    o.policy_opts.cache_threshold = *v;
  }
  o.policy_opts.balance_abs_threshold = opt_int(L, t, "balance_abs_threshold", o.policy_opts.balance_abs_threshold, 0, 1 << 30);
  o.policy_opts.balance_rel_threshold = opt_positive(L, t, "balance_rel_threshold", o.policy_opts.balance_rel_threshold);
  o.policy_opts.max_tree_chars = static_cast<size_t>(opt_int(L, t, "max_tree_chars", static_cast<int>(o.policy_opts.max_tree_chars), 1, 1 << 30));
  o.policy_opts.seed = static_cast<uint64_t>(opt_int(L, t, "seed", 0, 0, 1 << 30));
  o.max_connections = static_cast<size_t>(opt_int(L, t, "max_connections", static_cast<int>(o.max_connections), 1, 1 << 24));
  o.max_conns_per_worker = opt_int(L, t, "max_conns_per_worker", o.max_conns_per_worker, 1, 1 << 20);
  return o;
}

void push_worker(lua_State* L, const router::WorkerInfo& w) {
  lua_createtable(L, 0, 8);
  set_string(L, "id", std::to_string(w.id));
  set_string(L, "url", w.url);
  set_bool(L, "is_healthy", w.healthy);
  set_string(L, "status", w.status);
  set_number(L, "load", w.load);
  set_string(L, "circuit_state", w.circuit);
  set_number(L, "requests", static_cast<double>(w.requests));
  set_number(L, "failures", static_cast<double>(w.failures));
  set_string(L, "last_error", w.last_error);
  set_string(L, "worker_type", w.type);
  if (w.bootstrap_port > 0) set_number(L, "bootstrap_port", w.bootstrap_port);
}

int l_start(lua_State* L) {
  arg::table(L, 1, "opts");
  router::RouterOptions o = read_options(L, 1);
  std::unique_ptr<router::Router> r;
  try {
    r = std::make_unique<router::Router>(std::move(o));  // invalid_argument: misuse (bad worker URL)
  } catch (const std::invalid_argument& e) {
    throw ArgError(0, "opts", e.what());
  }
  try {
    r->start();
  } catch (const std::exception& e) {
    std::string msg = e.what();
    r.reset();
    return fail(L, msg);  // a busy port is a runtime failure
  }
  void* mem = lua_newuserdata(L, sizeof(RouterBox));
  auto* box = new (mem) RouterBox();
  box->router = std::move(r);
  registry_get(L, &kRouterMt);
  lua_setmetatable(L, -2);
  return 1;
}

int l_url(lua_State* L) {
  const std::string u = check_router(L, 1).router->url();
  lua_pushlstring(L, u.data(), u.size());
  return 1;
}

int l_port(lua_State* L) {
  lua_pushinteger(L, check_router(L, 1).router->port());
  return 1;
}

int l_add(lua_State* L) {
  RouterBox& b = check_router(L, 1);
  const std::string url(arg::string(L, 2, "url"));
  // opts: {worker_type = "regular" | "prefill" | "decode", bootstrap_port = N}
  router::WorkerType type = router::WorkerType::regular;
  int bootstrap_port = 0;
  if (!lua_isnoneornil(L, 3)) {
    arg::table(L, 3, "opts");
    if (auto v = arg::field_string(L, 3, "worker_type", "opts"); v && !router::parse_worker_type(*v, type))
      throw ArgError(3, "opts.worker_type", "'regular', 'prefill' or 'decode' expected, got '" + std::string(*v) + "'");
    if (auto v = arg::field_integer(L, 3, "bootstrap_port", "opts")) {
      if (*v < 1 || *v > 65535)
        throw ArgError(3, "opts.bootstrap_port", "an integer 1-65535 expected, got " + std::to_string(*v));
      bootstrap_port = static_cast<int>(*v);
    }
  }
  router::WorkerInfo info;
  const std::string err = b.router->add_worker(url, &info, type, bootstrap_port);
  if (!err.empty()) return fail(L, err);
  push_worker(L, info);
  return 1;
}

int l_remove(lua_State* L) {
  RouterBox& b = check_router(L, 1);
  const std::string key(arg::string(L, 2, "url"));
  lua_pushboolean(L, b.router->remove_worker(key));
  return 1;
}

int l_workers(lua_State* L) {
  auto ws = check_router(L, 1).router->workers();
  lua_createtable(L, static_cast<int>(ws.size()), 0);
  for (size_t i = 0; i < ws.size(); ++i) {
    push_worker(L, ws[i]);
    lua_rawseti(L, -2, static_cast<int>(i + 1));
  }
  return 1;
}

int l_metrics(lua_State* L) {
  const std::string text = check_router(L, 1).router->metrics_text();
  lua_pushlstring(L, text.data(), text.size());
  return 1;
}

int l_stop(lua_State* L) {
  auto* b = static_cast<RouterBox*>(check_udata(L, 1, &kRouterMt, "router", "rl.router handle"));
  if (b->router) b->router->stop();
  b->router.reset();
  return 0;
}

int l_gc(lua_State* L) {
  auto* b = static_cast<RouterBox*>(lua_touserdata(L, 1));
  if (b) b->~RouterBox();  // stops the thread if still running
  return 0;
}

// defaults() -> json: the C++ defaults of the options lua/rl/router/options.lua declares
// (tests/lua/router_spec.lua compares them).
int l_defaults(lua_State* L) {
  const router::RouterOptions o;
  const nlohmann::json j = {{"host", o.host},
                            {"port", o.port},
                            {"allow_remote", o.allow_remote},
                            {"allow_link_local_workers", o.allow_link_local_workers},
                            {"policy", o.policy},
                            {"health_interval", o.health_interval_s},
                            {"health_timeout", o.health_timeout_s},
                            {"health_failure_threshold", o.health_failure_threshold},
                            {"health_success_threshold", o.health_success_threshold},
                            {"health_path", o.health_path},
                            {"max_retries", o.max_retries},
                            {"retry_backoff", o.retry_backoff_s},
                            {"retry_max_backoff", o.retry_max_backoff_s},
                            {"request_timeout", o.request_timeout_s},
                            {"connect_timeout", o.connect_timeout_s},
                            {"circuit_failure_threshold", o.breaker.failure_threshold},
                            {"circuit_success_threshold", o.breaker.success_threshold},
                            {"circuit_open_time", o.breaker.open_s},
                            {"cache_threshold", o.policy_opts.cache_threshold},
                            {"balance_abs_threshold", o.policy_opts.balance_abs_threshold},
                            {"balance_rel_threshold", o.policy_opts.balance_rel_threshold},
                            {"max_tree_chars", o.policy_opts.max_tree_chars},
                            {"max_connections", o.max_connections},
                            {"max_conns_per_worker", o.max_conns_per_worker},
                            {"seed", o.policy_opts.seed},
                            {"pd_disaggregation", o.pd_disaggregation}};
  const std::string s = j.dump();
  lua_pushlstring(L, s.data(), s.size());
  return 1;
}

int l_policies(lua_State* L) {
  const auto& names = router::policy_names();
  lua_createtable(L, static_cast<int>(names.size()), 0);
  for (size_t i = 0; i < names.size(); ++i) {
    lua_pushstring(L, names[i].c_str());
    lua_rawseti(L, -2, static_cast<int>(i + 1));
  }
  return 1;
}

}  // namespace

void open_router(lua_State* L, int t) {
  static const Reg methods[] = {
      {"url", entry<l_url>},         {"port", entry<l_port>},       {"add", entry<l_add>},
      {"remove", entry<l_remove>},   {"workers", entry<l_workers>}, {"metrics", entry<l_metrics>},
      {"stop", entry<l_stop>},
  };
  make_metatable(L, &kRouterMt, "rl.router.Router:", methods, std::size(methods), entry<l_gc>);
  static const Reg regs[] = {
      {"start", entry<l_start>}, {"policies", entry<l_policies>}, {"defaults", entry<l_defaults>},
  };
  register_functions(L, t, "rl.router.", regs);
}

}  // namespace rl::lua
