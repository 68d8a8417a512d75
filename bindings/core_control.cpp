// _core.control: the chunk inbox shared by the local REPL and `rlhost attach`
// (see core_control.hpp), and the control socket's state for Lua.
//
//   open() -> op            the op whose events are (request, client, op, code)
//   ready()                 the control task listens: deliver what queued up
//   respond(request, {ok=, values={...}, output=, error=, incomplete=})
//   info() -> {socket=, tcp_port=, token_file=, clients=} | nil
#include "bindings/core_control.hpp"

#include <spdlog/spdlog.h>

#include "bindings/core_module.hpp"
#include "bindings/host_context.hpp"
#include "bindings/trampoline.hpp"

namespace rl::lua {

namespace {
const char kHubKey = 0;  // registry key: lightuserdata -> ControlHub*
}

ControlHub::ControlHub(lua_State* L, HostContext& ctx)
    : L_(L), ctx_(ctx), self_(std::make_shared<ControlHub*>(this)) {
  lua_pushlightuserdata(L, this);
  registry_set(L, &kHubKey);
}

ControlHub::~ControlHub() {
  *self_ = nullptr;
  server_.reset();  // closes clients, removes the socket and the record
  if (inbox_op_) {
    ctx_.set_cancel(inbox_op_, {});
    ctx_.cancel(inbox_op_);
  }
  lua_pushnil(L_);
  registry_set(L_, &kHubKey);
}

ControlHub* ControlHub::find(lua_State* L) {
  return registry_pointer<ControlHub>(L, &kHubKey);
}

void ControlHub::listen(ControlServer::Options opts) {
  auto server = std::make_unique<ControlServer>(ctx_.loop(), std::move(opts));
  server->set_handlers(
      [this](const ControlRequest& req) {
        const uint64_t id = next_request_++;
        routes_.emplace(id, Route{req.client, req.request, {}});
        deliver(Event{id, req.client, req.op, req.code});
      },
      [this](uint64_t client) {
        // Forget the routes of its requests; Lua cancels its running chunks.
        for (auto it = routes_.begin(); it != routes_.end();)
          it = it->second.client == client ? routes_.erase(it) : std::next(it);
        deliver(Event{0, client, "disconnect", {}});
      });
  server->start();
  server_ = std::move(server);
}

void ControlHub::submit_local(const std::string& op, const std::string& code, ReplyFn on_reply) {
  const uint64_t id = next_request_++;
  routes_.emplace(id, Route{0, 0, std::move(on_reply)});
  deliver(Event{id, 0, op, code});
}

uint64_t ControlHub::open_inbox() {
  if (!inbox_op_) inbox_op_ = ctx_.new_op();
  return inbox_op_;
}

void ControlHub::inbox_ready() {
  if (ready_) return;
  ready_ = true;
  // Called from Lua (the control task): delivering now would re-enter the
  // scheduler, so hand the queue over on the next loop iteration.
  std::weak_ptr<ControlHub*> weak = self_;
  ctx_.loop().post([weak] {
    auto p = weak.lock();
    if (!p || !*p) return;
    ControlHub* hub = *p;
    auto events = std::move(hub->queued_);
    hub->queued_.clear();
    for (auto& ev : events) hub->deliver(std::move(ev));
  });
}

void ControlHub::deliver(Event ev) {
  if (!ready_ || !inbox_op_) {
    queued_.push_back(std::move(ev));
    return;
  }
  ctx_.deliver(
      inbox_op_,
      [&ev](lua_State* L) {
        lua_pushnumber(L, static_cast<lua_Number>(ev.request));
        lua_pushnumber(L, static_cast<lua_Number>(ev.client));
        lua_pushlstring(L, ev.op.data(), ev.op.size());
        lua_pushlstring(L, ev.code.data(), ev.code.size());
        return 4;
      },
      /*final=*/false);
}

void ControlHub::respond(uint64_t request, const ControlReply& reply) {
  auto it = routes_.find(request);
  if (it == routes_.end()) return;  // its client went away meanwhile
  Route route = std::move(it->second);
  routes_.erase(it);
  if (route.client == 0) {
    if (route.local) route.local(reply);
  } else if (server_) {
    server_->respond(route.server_request, reply);
  }
}

namespace {

ControlHub& hub_or_throw(lua_State* L) {
  auto* hub = ControlHub::find(L);
  if (!hub) throw std::runtime_error("no REPL or control socket in this process");
  return *hub;
}

int l_open(lua_State* L) {
  lua_pushnumber(L, static_cast<lua_Number>(hub_or_throw(L).open_inbox()));
  return 1;
}

int l_ready(lua_State* L) {
  hub_or_throw(L).inbox_ready();
  return 0;
}

// respond(request, reply): reply fields are optional; values must be strings.
int l_respond(lua_State* L) {
  const auto request = arg::integer(L, 1, "request");
  arg::table(L, 2, "reply");
  ControlReply reply;
  reply.ok = arg::field_boolean(L, 2, "ok", "reply").value_or(true);
  reply.incomplete = arg::field_boolean(L, 2, "incomplete", "reply").value_or(false);
  reply.output = std::string(arg::field_string(L, 2, "output", "reply").value_or(""));
  reply.error = std::string(arg::field_string(L, 2, "error", "reply").value_or(""));
  lua_getfield(L, 2, "values");
  if (lua_istable(L, -1)) {
    const int n = static_cast<int>(lua_objlen(L, -1));
    for (int i = 1; i <= n; ++i) {
      lua_rawgeti(L, -1, i);
      if (lua_type(L, -1) != LUA_TSTRING) {
        lua_pop(L, 2);
        throw ArgError(2, "reply.values[" + std::to_string(i) + "]", "string expected");
      }
      size_t len = 0;
      const char* s = lua_tolstring(L, -1, &len);
      reply.values.emplace_back(s, len);
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
  hub_or_throw(L).respond(static_cast<uint64_t>(request), reply);
  return 0;
}

int l_info(lua_State* L) {
  auto* hub = ControlHub::find(L);
  if (!hub || !hub->server()) {
    lua_pushnil(L);
    return 1;
  }
  const ControlServer& s = *hub->server();
  lua_createtable(L, 0, 4);
  if (!s.socket_path().empty()) set_string(L, "socket", s.socket_path());
  if (s.tcp_port() > 0) set_number(L, "tcp_port", s.tcp_port());
  if (!s.token_path().empty()) set_string(L, "token_file", s.token_path());
  set_number(L, "clients", static_cast<double>(s.client_count()));
  return 1;
}

}  // namespace

void open_control(lua_State* L, int t) {
  static const Reg regs[] = {
      {"open", entry<l_open>},
      {"ready", entry<l_ready>},
      {"respond", entry<l_respond>},
      {"info", entry<l_info>},
  };
  register_functions(L, t, "rl.control.", regs);
}

}  // namespace rl::lua
