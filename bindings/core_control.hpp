// The host side of the REPL and the control socket: one "chunk inbox" per Lua
// state. Chunks typed at the local REPL (client 0) and chunks sent by
// `rlhost attach` (clients 1, 2, ...) all arrive in Lua the same way: as
// events of one op, read by the "control" task (lua/rl/_host.lua), which runs
// each chunk as a task of its own and answers with _core.control.respond().
// So attached code runs between coroutine steps, never inside recipe code.
#pragma once

#include <lua.hpp>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "host/control_server.hpp"

namespace rl::lua {

class HostContext;

class ControlHub {
 public:
  using ReplyFn = std::function<void(const ControlReply&)>;

  ControlHub(lua_State* L, HostContext& ctx);
  ~ControlHub();  // stops the server; call before lua_close
  ControlHub(const ControlHub&) = delete;
  ControlHub& operator=(const ControlHub&) = delete;

  // The hub of this state, or nullptr (e.g. a state without a HostSession).
  static ControlHub* find(lua_State* L);

  // Opens the control socket(s); throws rl::Error.
  void listen(ControlServer::Options opts);
  ControlServer* server() const { return server_.get(); }

  // A request from the local REPL ("eval" or "complete?"). on_reply runs when
  // Lua answers, possibly from inside the Lua scheduler: it must not call Lua.
  void submit_local(const std::string& op, const std::string& code, ReplyFn on_reply);

  // ---- used by _core.control ----
  uint64_t open_inbox();                         // the op id chunks arrive on
  void inbox_ready();                            // Lua is waiting: flush queued events
  void respond(uint64_t request, const ControlReply& reply);

 private:
  struct Event {
    uint64_t request = 0;  // 0 for "disconnect" (nothing to answer)
    uint64_t client = 0;
    std::string op;
    std::string code;
  };
  struct Route {
    uint64_t client = 0;          // 0: the local REPL
    uint64_t server_request = 0;  // for clients > 0
    ReplyFn local;                // for client 0
  };
  void deliver(Event ev);

  lua_State* L_;
  HostContext& ctx_;
  std::unique_ptr<ControlServer> server_;
  uint64_t inbox_op_ = 0;
  bool ready_ = false;
  std::deque<Event> queued_;  // arrived before the control task was listening
  uint64_t next_request_ = 1;
  std::unordered_map<uint64_t, Route> routes_;
  std::shared_ptr<ControlHub*> self_;  // for posted callbacks
};

}  // namespace rl::lua
