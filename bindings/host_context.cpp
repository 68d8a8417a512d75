#include "bindings/host_context.hpp"

#include <spdlog/spdlog.h>

#include "base/cpu_set.hpp"
#include "bindings/trampoline.hpp"

namespace rl::lua {

static const char kRegistryKey = 0;  // address used as a unique registry key

HostContext::HostContext(lua_State* L, EventLoop& loop) : L_(L), loop_(loop) {
  lua_pushlightuserdata(L, this);
  registry_set(L, &kRegistryKey);
}

HostContext::~HostContext() {
  // Runs after lua_close: must not touch the Lua state.
  cancel_all();
}

void HostContext::cancel_all() {
  auto ops = std::move(ops_);
  ops_.clear();
  for (auto& [id, cancel] : ops)
    if (cancel) cancel();
}

HostContext& HostContext::get(lua_State* L) {
  auto* ctx = registry_pointer<HostContext>(L, &kRegistryKey);
  if (!ctx) throw std::logic_error("no host context in this Lua state (internal error)");
  return *ctx;
}

uint64_t HostContext::new_op(std::function<void()> cancel) {
  const uint64_t id = next_op_++;
  ops_.emplace(id, std::move(cancel));
  return id;
}

void HostContext::set_cancel(uint64_t id, std::function<void()> cancel) {
  auto it = ops_.find(id);
  if (it != ops_.end()) it->second = std::move(cancel);
}

bool HostContext::cancel(uint64_t id) {
  auto it = ops_.find(id);
  if (it == ops_.end()) return false;
  auto fn = std::move(it->second);
  ops_.erase(it);
  if (fn) fn();
  return true;
}

void HostContext::deliver(uint64_t id, const Push& push, bool final) {
  if (!ops_.count(id)) return;  // cancelled meanwhile
  if (final) ops_.erase(id);
  call_dispatcher(id, push ? &push : nullptr);
}

void HostContext::request_tick() {
  if (tick_pending_) return;
  tick_pending_ = true;
  loop_.post([this] {
    tick_pending_ = false;
    call_dispatcher(0, nullptr);
  });
}

void HostContext::set_dispatcher(int ref) {
  if (dispatcher_ref_ != LUA_NOREF) luaL_unref(L_, LUA_REGISTRYINDEX, dispatcher_ref_);
  dispatcher_ref_ = ref;
}

void HostContext::call_dispatcher(uint64_t id, const Push* push) {
  if (dispatcher_ref_ == LUA_NOREF) return;
  lua_State* L = L_;
  const int top = lua_gettop(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, dispatcher_ref_);
  lua_pushnumber(L, static_cast<lua_Number>(id));
  int n = 1;
  if (push) n += (*push)(L);
  std::string err;
  if (!call_protected(L, n, 0, &err)) {
    ++dispatcher_errors_;
    spdlog::error("internal error in the task dispatcher: {}", err);
  }
  lua_settop(L, top);
}

void post_op_text(HostContext* ctx, const std::shared_ptr<std::atomic<bool>>& alive, uint64_t op, bool ok,
                  std::string text) {
  ctx->loop().post([ctx, alive, op, ok, text = std::move(text)] {
    if (!alive->load()) return;
    ctx->deliver(op, [&](lua_State* S) {
      if (ok) lua_pushliteral(S, "done");
      else lua_pushliteral(S, "error");
      lua_pushlstring(S, text.data(), text.size());
      return 2;
    }, true);
  });
}

int OpThread::start(lua_State* L, std::function<std::string()> fn) {
  join();
  HostContext* c = &HostContext::get(L);
  const uint64_t op = c->new_op();
  busy->store(true);
  job = std::thread([c, alive = alive, busy = busy, op, cpus = cpus, fn = std::move(fn)] {
    bool ok = true;
    std::string text;
    try {
      if (!cpus.empty()) pin_thread(cpus);
      text = fn();
    } catch (const std::exception& e) {
      ok = false;
      text = e.what();
    }
    busy->store(false);
    post_op_text(c, alive, op, ok, std::move(text));
  });
  lua_pushnumber(L, static_cast<lua_Number>(op));
  return 1;
}

}  // namespace rl::lua
