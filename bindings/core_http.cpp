// _core.http: the HTTP client, servers and SSE parser for lua/rl/http.lua.
//
//   request(opts) -> op        events: ("chunk", bytes)* then ("done", resp) | ("error", msg, timed_out)
//                              opts.body: a string or an rl.http.Body (bindings/http_body.hpp; :size())
//   serve(opts) -> server      op events: ("request", id, req)* then ("closed")
//   respond(id, status, headers, body) -> bool
//   sse_parser() -> parser     parser:feed(bytes) -> {events...}; parser:finish()
//   stats() / configure(opts)
//
// One HttpClient per Lua state, created on first use on the HostContext's loop
// and owned (with the table of pending server requests) by an HttpState that a
// registry userdata keeps alive until lua_close. Op cancel callbacks and server
// callbacks hold weak/shared references to it, never raw pointers into Lua.
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "base/live_objects.hpp"
#include "bindings/core_module.hpp"
#include "bindings/host_context.hpp"
#include "bindings/http_body.hpp"
#include "bindings/trampoline.hpp"
#include "net/event_server.hpp"
#include "net/http_client.hpp"
#include "net/http_server.hpp"
#include "net/sse.hpp"

namespace rl::lua {
namespace {

using net::AsyncExchangePtr;

const char kStateKey = 0;   // registry: the HttpState userdata
const char kServerMt = 0;   // registry: metatable of server userdata
const char kParserMt = 0;   // registry: metatable of SSE parser userdata
const char kBodyMt = 0;     // registry: metatable of rl.http.Body userdata

struct ServerBox;

struct HttpState {
  std::unique_ptr<net::HttpClient> client;
  net::HttpClient::Options client_opts;
  uint64_t next_request = 1;
  struct Pending {
    AsyncExchangePtr exchange;                  // a threaded server's request, or
    std::shared_ptr<net::Responder> responder;  // an event-driven server's
    std::weak_ptr<ServerBox> server;
  };
  std::unordered_map<uint64_t, Pending> pending;  // server requests awaiting respond()

  net::HttpClient& get_client(EventLoop& loop) {
    if (!client) client = std::make_unique<net::HttpClient>(loop, client_opts);
    return *client;
  }
};
using StatePtr = std::shared_ptr<HttpState>;

// One Lua-visible server: counted, so tests see servers and requests freed.
struct ServerBox : LiveObject {
  HostContext* ctx = nullptr;
  StatePtr state;
  std::unique_ptr<net::HttpServer> server;  // threaded (cpp-httplib), or
  std::unique_ptr<net::EventServer> event;  // event-driven: no thread per connection
  uint64_t op = 0;
  bool stopped = false;
  bool accepting = false;  // event-driven: requests before start() wait in `early`
  std::vector<std::pair<net::ServerRequest, std::shared_ptr<net::Responder>>> early;
  std::unordered_set<uint64_t> ids;  // its entries in state->pending

  // notify: deliver the op's final "closed" event (from the loop, not from
  // inside this call, so Lua never re-enters the scheduler here).
  void stop(bool notify) {
    if (stopped) return;
    stopped = true;
    if (server) server->stop();  // waiting workers answer 503; joins threads
    if (event) event->stop();    // closes every connection: pending responders die
    early.clear();
    for (uint64_t id : ids) state->pending.erase(id);
    ids.clear();
    if (ctx->live(op)) {
      ctx->set_cancel(op, {});
      if (notify) {
        HostContext* c = ctx;
        const uint64_t id = op;
        c->loop().call_later(0, [c, id] {
          c->deliver(id, [](lua_State* L) { lua_pushliteral(L, "closed"); return 1; }, true);
        });
      } else {
        ctx->cancel(op);
      }
    }
  }
};
using BoxPtr = std::shared_ptr<ServerBox>;

// A counted token held by an in-flight client request's callbacks.
struct RequestToken : LiveObject {};

// ---- helpers -----------------------------------------------------------------------
[[noreturn]] void bad_field(const std::string& name, const std::string& what) { throw ArgError(0, name, what); }

// opts.<key> as seconds > 0, if present.
std::optional<double> opt_seconds(lua_State* L, int t, const char* key) {
  auto v = arg::field_number(L, t, key, "opts");
  if (v && !(*v > 0)) bad_field(std::string("opts.") + key, "seconds > 0 expected");
  return v;
}

// opts.<key> as an integer in [lo, hi], if present.
std::optional<int64_t> opt_int(lua_State* L, int t, const char* key, int64_t lo, int64_t hi) {
  auto v = arg::field_integer(L, t, key, "opts");
  if (v && (*v < lo || *v > hi))
    bad_field(std::string("opts.") + key, "integer " + std::to_string(lo) + "-" + std::to_string(hi) + " expected");
  return v;
}

std::optional<std::string> opt_str(lua_State* L, int t, const char* key) {
  auto v = arg::field_string(L, t, key, "opts");
  return v ? std::optional<std::string>(std::string(*v)) : std::nullopt;
}

StatePtr& get_state(lua_State* L) {
  auto* p = registry_pointer<StatePtr>(L, &kStateKey);
  if (!p) throw std::logic_error("rl._core.http is not initialised (internal error)");
  return *p;
}

bool has_line_break(std::string_view s) { return s.find_first_of("\r\n") != std::string_view::npos; }

// Decodes {name = value, ...} at index t (absolute) into `out`.
void decode_headers(lua_State* L, int t, const char* field, net::HeaderList& out) {
  lua_getfield(L, t, field);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return;
  }
  const std::string name = std::string("opts.") + field;
  if (lua_type(L, -1) != LUA_TTABLE) {
    const std::string got = arg::type_name(L, -1);
    lua_pop(L, 1);
    bad_field(name, "table expected, got " + got);
  }
  const int h = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, h) != 0) {
    if (lua_type(L, -2) != LUA_TSTRING) {
      const std::string got = arg::type_name(L, -2);
      lua_settop(L, h - 1);
      bad_field(name, "header names must be strings, got a " + got + " key");
    }
    std::string key = lua_tostring(L, -2);
    const int vt = lua_type(L, -1);
    if (vt != LUA_TSTRING && vt != LUA_TNUMBER) {
      const std::string got = arg::type_name(L, -1);
      lua_settop(L, h - 1);
      bad_field(name + "." + key, "string expected, got " + got);
    }
    size_t len = 0;
    const char* v = lua_tolstring(L, -1, &len);  // a number value is converted in the copy on the stack
    std::string value(v, len);
    if (key.empty() || has_line_break(key) || key.find(':') != std::string::npos || has_line_break(value)) {
      lua_settop(L, h - 1);
      bad_field(name + "." + key, "header names and values must not contain line breaks (names: no ':')");
    }
    out.emplace_back(std::move(key), std::move(value));
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

// Pushes {name = value} (repeated names joined with ", ", as HTTP allows).
void push_headers(lua_State* L, const net::HeaderList& headers) {
  lua_createtable(L, 0, static_cast<int>(headers.size()));
  for (auto& [k, v] : headers) {
    lua_getfield(L, -1, k.c_str());
    if (lua_isstring(L, -1)) {
      std::string joined = lua_tostring(L, -1);
      joined += ", ";
      joined += v;
      lua_pop(L, 1);
      lua_pushlstring(L, joined.data(), joined.size());
    } else {
      lua_pop(L, 1);
      lua_pushlstring(L, v.data(), v.size());
    }
    lua_setfield(L, -2, k.c_str());
  }
}

int push_response(lua_State* L, const net::HttpResponse& r) {
  lua_pushliteral(L, "done");
  lua_createtable(L, 0, 5);
  set_number(L, "status", static_cast<double>(r.status));
  push_headers(L, r.headers);
  lua_setfield(L, -2, "headers");
  set_string(L, "body", r.body);
  set_number(L, "elapsed", r.timings.total_s);
  lua_createtable(L, 0, 4);
  set_number(L, "queued", r.timings.queued_s);
  set_number(L, "connect", r.timings.connect_s);
  set_number(L, "ttfb", r.timings.ttfb_s);
  set_number(L, "total", r.timings.total_s);
  lua_setfield(L, -2, "timings");
  return 2;
}

std::string decode_method(lua_State* L, int t) {
  auto m = arg::field_string(L, t, "method", "opts");
  std::string method = m ? std::string(*m) : "GET";
  if (method.empty()) bad_field("opts.method", "non-empty string expected");
  for (char c : method)
    if (!(c >= 'A' && c <= 'Z') && c != '-' && c != '_')
      bad_field("opts.method", "an upper-case HTTP method expected (GET, POST, ...), got '" + method + "'");
  return method;
}

// ---- client ------------------------------------------------------------------------
// request(opts) -> op id
int l_request(lua_State* L) {
  arg::table(L, 1, "opts");
  net::HttpRequest req;
  req.method = decode_method(L, 1);
  auto url = arg::field_string(L, 1, "url", "opts");
  if (!url) bad_field("opts.url", "string expected, got nil");
  req.url = std::string(*url);
  if (req.url.rfind("http://", 0) != 0 && req.url.rfind("https://", 0) != 0)
    bad_field("opts.url", "an http:// or https:// URL expected, got '" + req.url + "'");
  lua_getfield(L, 1, "body");
  const SharedBytes* shared = test_http_body(L, -1);
  if (shared && !*shared) bad_field("opts.body", "an rl.http.Body that was released");
  if (shared) req.shared_body = *shared;
  lua_pop(L, 1);
  if (!shared) {
    if (auto body = arg::field_string(L, 1, "body", "opts")) req.body = std::string(*body);
  }
  decode_headers(L, 1, "headers", req.headers);
  req.timeout_s = opt_seconds(L, 1, "timeout").value_or(0);
  req.connect_timeout_s = opt_seconds(L, 1, "connect_timeout").value_or(0);
  req.max_per_host = static_cast<int>(opt_int(L, 1, "max_per_host", 1, 1000000).value_or(0));
  if (auto v = arg::field_boolean(L, 1, "follow_redirects", "opts")) req.follow_redirects = *v;
  if (auto v = arg::field_boolean(L, 1, "fresh_connection", "opts")) req.fresh_connection = *v;
  req.max_body_bytes = static_cast<size_t>(opt_int(L, 1, "max_body", 1, int64_t{1} << 50).value_or(0));
  bool stream = false;
  for (const char* cb : {"on_chunk", "on_event"}) {
    lua_getfield(L, 1, cb);
    const int type = lua_type(L, -1);
    const std::string got = arg::type_name(L, -1);
    lua_pop(L, 1);
    if (type == LUA_TNIL) continue;
    if (type != LUA_TFUNCTION) bad_field(std::string("opts.") + cb, "function expected, got " + got);
    stream = true;
  }

  HostContext& ctx = HostContext::get(L);
  StatePtr state = get_state(L);
  net::HttpClient& client = state->get_client(ctx.loop());
  const uint64_t op = ctx.new_op();
  auto token = std::make_shared<RequestToken>();
  HostContext* c = &ctx;
  net::HttpClient::ChunkFn on_chunk;
  if (stream)
    on_chunk = [c, op, token](std::string_view bytes) {
      c->deliver(op, [bytes](lua_State* S) {
        lua_pushliteral(S, "chunk");
        lua_pushlstring(S, bytes.data(), bytes.size());
        return 2;
      }, false);
    };
  auto on_done = [c, op, token](net::HttpResult&& r) {
    if (r.ok) {
      c->deliver(op, [&r](lua_State* S) { return push_response(S, r.response); }, true);
    } else {
      c->deliver(op, [&r](lua_State* S) {
        lua_pushliteral(S, "error");
        lua_pushlstring(S, r.error.data(), r.error.size());
        lua_pushboolean(S, r.timed_out);
        return 3;
      }, true);
    }
  };
  token.reset();  // the callbacks hold it now
  uint64_t id = 0;
  try {
    id = client.submit(std::move(req), std::move(on_done), std::move(on_chunk));
  } catch (...) {
    ctx.cancel(op);
    throw;
  }
  std::weak_ptr<HttpState> weak = state;
  ctx.set_cancel(op, [weak, id] {
    if (auto s = weak.lock(); s && s->client) s->client->cancel(id);
  });
  lua_pushnumber(L, static_cast<lua_Number>(op));
  return 1;
}

int l_stats(lua_State* L) {
  StatePtr state = get_state(L);
  net::HttpClient::Stats s;
  if (state->client) s = state->client->stats();
  lua_createtable(L, 0, 8);
  set_number(L, "submitted", static_cast<double>(s.submitted));
  set_number(L, "started", static_cast<double>(s.started));
  set_number(L, "finished", static_cast<double>(s.finished));
  set_number(L, "cancelled", static_cast<double>(s.cancelled));
  set_number(L, "connections_opened", static_cast<double>(s.connections_opened));
  set_number(L, "queued", static_cast<double>(s.queued));
  set_number(L, "active", static_cast<double>(s.active));
  set_number(L, "pending_server_requests", static_cast<double>(state->pending.size()));
  return 1;
}

// configure{max_per_host=, max_connections=, timeout=, connect_timeout=}: client defaults.
int l_configure(lua_State* L) {
  arg::table(L, 1, "opts");
  StatePtr state = get_state(L);
  auto o = state->client_opts;
  o.max_per_host = static_cast<int>(opt_int(L, 1, "max_per_host", 1, 1000000).value_or(o.max_per_host));
  o.max_connections = static_cast<long>(opt_int(L, 1, "max_connections", 1, 1000000).value_or(o.max_connections));
  o.timeout_s = opt_seconds(L, 1, "timeout").value_or(o.timeout_s);
  o.connect_timeout_s = opt_seconds(L, 1, "connect_timeout").value_or(o.connect_timeout_s);
  if (auto v = arg::field_boolean(L, 1, "use_env_proxy", "opts")) o.use_env_proxy = *v;
  state->client_opts = o;
  if (state->client) state->client->set_options(o);
  return 0;
}

// ---- servers -------------------------------------------------------------------------
BoxPtr& check_server(lua_State* L, int idx) {
  auto* p = static_cast<BoxPtr*>(check_udata(L, idx, &kServerMt, "server", "rl.http server"));
  if (!*p) throw ArgError(idx, "server", "rl.http server already collected");
  return *p;
}

// The server op's event ("request", id, {method, path, query, headers, body, remote_addr,
// remote_port}) for either server's request type.
template <class Request>
int push_request(lua_State* L, uint64_t id, const Request& r, int remote_port) {
  lua_pushliteral(L, "request");
  lua_pushnumber(L, static_cast<lua_Number>(id));
  lua_createtable(L, 0, 7);
  set_string(L, "method", r.method);
  set_string(L, "path", r.path);
  set_string(L, "query", r.query);
  push_headers(L, r.headers);
  lua_setfield(L, -2, "headers");
  set_string(L, "body", r.body);
  set_string(L, "remote_addr", r.remote_addr);
  set_number(L, "remote_port", remote_port);
  return 3;
}

// Loop thread: a request from a worker. Hands it to the server's op, or
// answers 503 when nobody listens any more.
void on_server_request(const std::weak_ptr<ServerBox>& weak, const AsyncExchangePtr& ex) {
  BoxPtr box = weak.lock();
  if (!box || box->stopped || !box->ctx->live(box->op)) {
    ex->respond({503, {{"Content-Type", "text/plain; charset=utf-8"}}, "server stopping\n"});
    return;
  }
  HttpState& st = *box->state;
  const uint64_t id = st.next_request++;
  ex->tag = id;
  st.pending.emplace(id, HttpState::Pending{ex, nullptr, weak});
  box->ids.insert(id);
  const net::AsyncRequest& r = ex->request();
  box->ctx->deliver(box->op, [&r, id](lua_State* L) { return push_request(L, id, r, r.remote_port); }, false);
}

// Loop thread: a request to an event-driven server. Before start() it waits in `early`;
// after stop() or with nobody listening it gets a 503.
void on_event_request(const std::weak_ptr<ServerBox>& weak, net::ServerRequest& r,
                      std::shared_ptr<net::Responder> res) {
  BoxPtr box = weak.lock();
  if (box && !box->stopped && !box->accepting) {
    box->early.emplace_back(r, std::move(res));  // a copy: the server owns r
    return;
  }
  if (!box || box->stopped || !box->ctx->live(box->op)) {
    res->send(503, {{"Content-Type", "text/plain; charset=utf-8"}}, "server stopping\n");
    return;
  }
  HttpState& st = *box->state;
  const uint64_t id = st.next_request++;
  st.pending.emplace(id, HttpState::Pending{nullptr, res, weak});
  box->ids.insert(id);
  res->on_close([weak, id] {  // the client went away first: forget the request
    if (auto b = weak.lock()) {
      b->state->pending.erase(id);
      b->ids.erase(id);
    }
  });
  box->ctx->deliver(box->op, [&r, id](lua_State* L) { return push_request(L, id, r, 0); }, false);
}

// serve(opts) -> server | nil, err. Binds at once (so port() is known) but
// accepts only after server:start(), once Lua listens on server:op().
// Binds the server (listen), gives it an op whose cancel stops it (Lua closed the op:
// its accept task ended) and pushes it as a userdata; a bind failure is (nil, message).
template <class Bind>
int push_server(lua_State* L, HostContext& ctx, std::shared_ptr<ServerBox> box, Bind&& bind) {
  std::string bind_error;
  try {
    bind();
  } catch (const std::exception& e) {
    bind_error = e.what();
  }
  if (!bind_error.empty()) {
    box.reset();
    return fail(L, bind_error);
  }
  box->op = ctx.new_op();
  std::weak_ptr<ServerBox> weak = box;
  ctx.set_cancel(box->op, [weak] {
    if (auto b = weak.lock()) b->stop(false);
  });
  void* mem = lua_newuserdata(L, sizeof(BoxPtr));
  new (mem) BoxPtr(std::move(box));
  registry_get(L, &kServerMt);
  lua_setmetatable(L, -2);
  return 1;
}

int l_serve(lua_State* L) {
  arg::table(L, 1, "opts");
  net::HttpServerOptions so;
  so.name = "rl.http.serve";
  so.host = opt_str(L, 1, "host").value_or(so.host);
  so.port = static_cast<int>(opt_int(L, 1, "port", 0, 65535).value_or(0));  // 0: any free port
  so.threads = static_cast<int>(opt_int(L, 1, "threads", 1, 4096).value_or(so.threads));
  if (auto v = arg::field_boolean(L, 1, "allow_remote", "opts")) so.allow_remote = *v;
  so.async_timeout_s = opt_seconds(L, 1, "timeout").value_or(so.async_timeout_s);
  so.max_body_bytes = static_cast<size_t>(opt_int(L, 1, "max_body", 0, int64_t{1} << 40).value_or(so.max_body_bytes));
  auto static_dir = opt_str(L, 1, "static_dir");
  auto mount = opt_str(L, 1, "static_mount");
  lua_getfield(L, 1, "handler");
  const int htype = lua_type(L, -1);
  const std::string hgot = arg::type_name(L, -1);
  lua_pop(L, 1);
  if (htype != LUA_TNIL && htype != LUA_TFUNCTION) bad_field("opts.handler", "function expected, got " + hgot);
  if (htype == LUA_TNIL && !static_dir) bad_field("opts.handler", "a handler function or opts.static_dir is required");
  if (!so.allow_remote && !net::HttpServer::is_loopback(so.host))
    bad_field("opts.host", "'" + so.host + "' is not a loopback address; rlhost servers have no authentication, so "
                           "they bind 127.0.0.1 unless opts.allow_remote = true says otherwise");

  const bool event_driven = arg::field_boolean(L, 1, "event_driven", "opts").value_or(false);
  if (event_driven) {
    lua_getfield(L, 1, "threads");
    const bool has_threads = !lua_isnil(L, -1);
    lua_pop(L, 1);
    if (has_threads) bad_field("opts.threads", "an event-driven server has no worker threads (drop threads or event_driven)");
    if (htype != LUA_TFUNCTION || static_dir)
      bad_field("opts.event_driven", "an event-driven server runs a handler and serves no static files");
  }

  HostContext& ctx = HostContext::get(L);
  auto box = std::make_shared<ServerBox>();
  box->ctx = &ctx;
  box->state = get_state(L);
  if (event_driven) {
    net::EventServer::Options eo;
    eo.name = "rl.http.serve";
    eo.host = so.host;
    eo.port = so.port;
    eo.allow_remote = so.allow_remote;
    eo.limits.max_body_bytes = so.max_body_bytes;
    std::weak_ptr<ServerBox> weak = box;
    box->event = std::make_unique<net::EventServer>(
        ctx.loop(), eo, [weak](net::ServerRequest& r, std::shared_ptr<net::Responder> res) {
          on_event_request(weak, r, std::move(res));
        });
    // binds and listens now, so port() is known; requests wait for start()
    net::EventServer* server = box->event.get();
    return push_server(L, ctx, std::move(box), [server] { server->start(); });
  }
  box->server = std::make_unique<net::HttpServer>(so);
  if (static_dir) box->server->serve_static(*static_dir, mount.value_or("/"));
  if (htype == LUA_TFUNCTION) {
    std::weak_ptr<ServerBox> weak = box;
    box->server->serve_async(
        ctx.loop(), [weak](AsyncExchangePtr ex) { on_server_request(weak, ex); },
        [weak](AsyncExchangePtr ex) {  // the worker gave up (timeout): forget it
          if (auto b = weak.lock()) {
            b->state->pending.erase(ex->tag);
            b->ids.erase(ex->tag);
          }
        });
  }
  net::HttpServer* server = box->server.get();
  return push_server(L, ctx, std::move(box), [server] { server->bind(); });
}

// start() -> bool: false when the server was stopped before it started.
int l_server_start(lua_State* L) {
  BoxPtr& box = check_server(L, 1);
  if (box->event) {
    if (!box->stopped && !box->accepting) {
      box->accepting = true;
      auto early = std::move(box->early);
      std::weak_ptr<ServerBox> weak = box;
      for (auto& [req, res] : early)
        if (res->alive()) on_event_request(weak, req, res);
    }
  } else if (!box->stopped && !box->server->running()) {
    box->server->start();
  }
  lua_pushboolean(L, !box->stopped);
  return 1;
}

int l_server_op(lua_State* L) {
  lua_pushnumber(L, static_cast<lua_Number>(check_server(L, 1)->op));
  return 1;
}

int l_server_port(lua_State* L) {
  BoxPtr& box = check_server(L, 1);
  lua_pushinteger(L, box->event ? box->event->port() : box->server->port());
  return 1;
}

int l_server_url(lua_State* L) {
  BoxPtr& box = check_server(L, 1);
  const std::string url = box->event ? box->event->url() : box->server->url();
  lua_pushlstring(L, url.data(), url.size());
  return 1;
}

int l_server_stop(lua_State* L) {
  check_server(L, 1)->stop(true);
  return 0;
}

int l_server_gc(lua_State* L) {
  auto* p = static_cast<BoxPtr*>(lua_touserdata(L, 1));
  if (p && *p) (*p)->stop(false);
  if (p) p->~BoxPtr();
  return 0;
}


// respond(id, status, headers, body) -> bool (false: the request is gone --
// timed out, or its server stopped).
int l_respond(lua_State* L) {
  const auto id = static_cast<uint64_t>(arg::integer(L, 1, "id"));
  const auto status = arg::integer(L, 2, "status");
  if (status < 100 || status > 999) throw ArgError(2, "status", "HTTP status 100-999 expected");
  net::AsyncResponse resp;
  resp.status = static_cast<int>(status);
  if (!lua_isnoneornil(L, 3)) {
    arg::table(L, 3, "headers");
    lua_newtable(L);  // decode_headers reads a field: wrap the table as {headers = t}
    lua_pushvalue(L, 3);
    lua_setfield(L, -2, "headers");
    decode_headers(L, lua_gettop(L), "headers", resp.headers);
    lua_pop(L, 1);
  }
  if (auto body = arg::opt_string(L, 4, "body")) resp.body = std::string(*body);
  StatePtr state = get_state(L);
  auto it = state->pending.find(id);
  if (it == state->pending.end()) {
    lua_pushboolean(L, 0);
    return 1;
  }
  HttpState::Pending p = std::move(it->second);
  state->pending.erase(it);
  if (auto box = p.server.lock()) box->ids.erase(id);
  if (p.responder) {
    if (!p.responder->alive()) {
      lua_pushboolean(L, 0);
      return 1;
    }
    p.responder->on_close({});
    p.responder->send(resp.status, resp.headers, resp.body);
    lua_pushboolean(L, 1);
    return 1;
  }
  lua_pushboolean(L, p.exchange->respond(std::move(resp)));
  return 1;
}

// ---- SSE -----------------------------------------------------------------------------
struct ParserBox : LiveObject {
  net::SseParser parser;
};

ParserBox& check_parser(lua_State* L, int idx) {
  return *static_cast<ParserBox*>(check_udata(L, idx, &kParserMt, "parser", "SSE parser"));
}

int l_sse_parser(lua_State* L) {
  void* mem = lua_newuserdata(L, sizeof(ParserBox));
  new (mem) ParserBox();
  registry_get(L, &kParserMt);
  lua_setmetatable(L, -2);
  return 1;
}

// parser:feed(bytes) -> {{event=, data=, id=, retry=}, ...}
int l_parser_feed(lua_State* L) {
  ParserBox& box = check_parser(L, 1);
  const auto bytes = arg::string(L, 2, "bytes");
  std::vector<net::SseEvent> events;
  box.parser.feed(bytes, events);
  lua_createtable(L, static_cast<int>(events.size()), 0);
  for (size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    lua_createtable(L, 0, 4);
    set_string(L, "event", e.event);
    set_string(L, "data", e.data);
    set_string(L, "id", e.id);
    if (e.retry) set_number(L, "retry", static_cast<double>(*e.retry));
    lua_rawseti(L, -2, static_cast<int>(i + 1));
  }
  return 1;
}

int l_parser_finish(lua_State* L) {
  check_parser(L, 1).parser.finish();
  return 0;
}

// ---- state ---------------------------------------------------------------------------
// rl.http.Body:size() -> bytes (0 once released)
int l_body_size(lua_State* L) {
  auto* b = static_cast<SharedBytes*>(check_udata(L, 1, &kBodyMt, "body", "rl.http.Body"));
  lua_pushnumber(L, static_cast<lua_Number>(*b ? (*b)->size() : 0));
  return 1;
}

// rl.http.Body:release(): lets the bytes go now (requests still sending them keep
// them until they end), not at the next collection: Lua sees a few bytes of userdata,
// not the megabytes behind it.
int l_body_release(lua_State* L) {
  static_cast<SharedBytes*>(check_udata(L, 1, &kBodyMt, "body", "rl.http.Body"))->reset();
  return 0;
}

}  // namespace

void open_http(lua_State* L, int t) {
  // The per-state HttpState, alive until lua_close.
  void* mem = lua_newuserdata(L, sizeof(StatePtr));
  new (mem) StatePtr(std::make_shared<HttpState>());
  lua_newtable(L);
  lua_pushliteral(L, "rl.http.state:__gc");
  lua_pushcclosure(L, entry<destroy_udata<StatePtr>>, 1);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  registry_set(L, &kStateKey);

  static const Reg server_methods[] = {
      {"start", entry<l_server_start>}, {"op", entry<l_server_op>},   {"port", entry<l_server_port>},
      {"url", entry<l_server_url>},     {"stop", entry<l_server_stop>},
  };
  make_metatable(L, &kServerMt, "rl.http.Server:", server_methods, std::size(server_methods), entry<l_server_gc>);
  static const Reg parser_methods[] = {
      {"feed", entry<l_parser_feed>},
      {"finish", entry<l_parser_finish>},
  };
  make_metatable(L, &kParserMt, "rl.http.SseParser:", parser_methods, std::size(parser_methods), entry<destroy_udata<ParserBox>>);

  static const Reg body_methods[] = {{"size", entry<l_body_size>}, {"release", entry<l_body_release>}};
  make_metatable(L, &kBodyMt, "rl.http.Body:", body_methods, std::size(body_methods), entry<destroy_udata<SharedBytes>>);

  static const Reg regs[] = {
      {"request", entry<l_request>},     {"stats", entry<l_stats>},     {"configure", entry<l_configure>},
      {"serve", entry<l_serve>},         {"respond", entry<l_respond>}, {"sse_parser", entry<l_sse_parser>},
  };
  register_functions(L, t, "rl.http.", regs);
}

void push_http_body(lua_State* L, SharedBytes bytes) {
  void* mem = lua_newuserdata(L, sizeof(SharedBytes));
  new (mem) SharedBytes(std::move(bytes));
  registry_get(L, &kBodyMt);
  lua_setmetatable(L, -2);
}

const SharedBytes* test_http_body(lua_State* L, int idx) {
  return static_cast<const SharedBytes*>(test_udata(L, idx, &kBodyMt));
}

}  // namespace rl::lua
