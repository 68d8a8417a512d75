// _core.metrics: the metric sinks of runtime/metrics for lua/rl/metrics.lua.
//
//   tensorboard_open(dir [, filename_suffix]) -> w | nil, err
//   w:add_scalars(step, {tag = number, ...} [, wall_time]) -> true | nil, err   (one event per tag, then flush)
//   w:flush() -> true | nil, err      w:close() -> true | nil, err      w:path() -> string
//   jsonl_open(path) -> j | nil, err
//   j:write(json_text) -> true | nil, err   (one line, appended whole)
//   j:close()                               j:path() -> string
//   text_serve{host, port, allow_remote, not_found_hint} -> s | nil, err   (net::TextServer)
//   s:set(path, content_type, body)   s:url()   s:port()   s:stop()
//
// Thin on purpose: what to log, how to name it and what to skip is the Lua
// module's business. Files that cannot be created or written are runtime
// failures (nil, err); wrong argument types raise.
#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/errors.hpp"
#include "base/live_objects.hpp"
#include "bindings/core_module.hpp"
#include "bindings/trampoline.hpp"
#include "metrics/jsonl_writer.hpp"
#include "net/text_server.hpp"
#include "metrics/tensorboard_writer.hpp"

namespace rl::lua {
namespace {

using metrics::JsonlWriter;
using metrics::Scalar;
using metrics::TensorBoardWriter;

const char kTensorBoardMt = 0;  // registry: metatable of TensorBoard writers
const char kJsonlMt = 0;        // registry: metatable of JSONL writers
const char kTextServerMt = 0;   // registry: metatable of text servers

struct TensorBoardBox : LiveObject {
  std::unique_ptr<TensorBoardWriter> w;
};
struct JsonlBox : LiveObject {
  std::unique_ptr<JsonlWriter> w;
};
struct TextServerBox : LiveObject {
  std::unique_ptr<net::TextServer> s;
};

TensorBoardWriter& check_tensorboard(lua_State* L) {
  auto* box = static_cast<TensorBoardBox*>(check_udata(L, 1, &kTensorBoardMt, "w", "TensorBoard writer"));
  if (!box->w) throw ArgError(1, "w", "TensorBoard writer already collected");
  return *box->w;
}

JsonlWriter& check_jsonl(lua_State* L) {
  auto* box = static_cast<JsonlBox*>(check_udata(L, 1, &kJsonlMt, "j", "JSONL writer"));
  if (!box->w) throw ArgError(1, "j", "JSONL writer already collected");
  return *box->w;
}

// Method arguments are numbered as the caller sees them (self is not #1).
template <class F>
auto method_arg(F&& decode) -> decltype(decode()) {
  try {
    return decode();
  } catch (const ArgError& e) {
    throw ArgError(e.index > 1 ? e.index - 1 : 0, e.name, e.what());
  }
}

// Runs `op`; a runtime failure (rl::Error: cannot write, closed) becomes `nil, err`.
template <class F>
int true_or_fail(lua_State* L, F&& op) {
  std::string err;
  try {
    op();
  } catch (const Error& e) {
    err = e.what();
  }
  if (!err.empty()) return fail(L, err);
  lua_pushboolean(L, 1);
  return 1;
}

// {tag = number} at idx → scalars sorted by tag (a stable order in the file).
std::vector<Scalar> decode_scalars(lua_State* L, int idx) {
  method_arg([&] { arg::table(L, idx, "values"); });
  std::vector<Scalar> out;
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TNUMBER) {
      const std::string got = std::string(arg::type_name(L, -2)) + " = " + arg::type_name(L, -1);
      lua_pop(L, 2);
      throw ArgError(idx - 1, "values", "table of string tags to numbers expected, got " + got);
    }
    size_t len = 0;
    const char* tag = lua_tolstring(L, -2, &len);
    out.push_back({std::string(tag, len), lua_tonumber(L, -1)});
    lua_pop(L, 1);
  }
  std::sort(out.begin(), out.end(), [](const Scalar& a, const Scalar& b) { return a.tag < b.tag; });
  return out;
}

// ---- TensorBoard --------------------------------------------------------------------
int l_tensorboard_open(lua_State* L) {
  const std::string dir(arg::string(L, 1, "dir"));
  const std::string suffix(arg::opt_string(L, 2, "filename_suffix").value_or(""));
  std::unique_ptr<TensorBoardWriter> w;
  std::string err;
  try {
    w = std::make_unique<TensorBoardWriter>(dir, suffix);
  } catch (const Error& e) {
    err = e.what();
  }
  if (!w) return fail(L, err);
  void* mem = lua_newuserdata(L, sizeof(TensorBoardBox));
  auto* box = new (mem) TensorBoardBox{};
  registry_get(L, &kTensorBoardMt);
  lua_setmetatable(L, -2);  // from here __gc destroys it
  box->w = std::move(w);
  return 1;
}

int l_tb_add_scalars(lua_State* L) {
  TensorBoardWriter& w = check_tensorboard(L);
  const int64_t step = method_arg([&] { return arg::integer(L, 2, "step"); });
  const auto wall_time = method_arg([&] { return arg::opt_number(L, 4, "wall_time"); });
  const std::vector<Scalar> scalars = decode_scalars(L, 3);
  return true_or_fail(L, [&] { w.add_scalars(scalars, step, wall_time); });
}

int l_tb_flush(lua_State* L) {
  TensorBoardWriter& w = check_tensorboard(L);
  return true_or_fail(L, [&] { w.flush(); });
}

int l_tb_close(lua_State* L) {
  TensorBoardWriter& w = check_tensorboard(L);
  return true_or_fail(L, [&] { w.close(); });
}

int l_tb_path(lua_State* L) {
  const std::string& p = check_tensorboard(L).path();
  lua_pushlstring(L, p.data(), p.size());
  return 1;
}

// ---- JSONL --------------------------------------------------------------------------
int l_jsonl_open(lua_State* L) {
  const std::string path(arg::string(L, 1, "path"));
  std::unique_ptr<JsonlWriter> w;
  std::string err;
  try {
    w = std::make_unique<JsonlWriter>(path);
  } catch (const Error& e) {
    err = e.what();
  }
  if (!w) return fail(L, err);
  void* mem = lua_newuserdata(L, sizeof(JsonlBox));
  auto* box = new (mem) JsonlBox{};
  registry_get(L, &kJsonlMt);
  lua_setmetatable(L, -2);
  box->w = std::move(w);
  return 1;
}

int l_jsonl_write(lua_State* L) {
  JsonlWriter& w = check_jsonl(L);
  const auto text = method_arg([&] { return arg::string(L, 2, "json_text"); });
  try {
    return true_or_fail(L, [&] { w.write_line(text); });
  } catch (const std::invalid_argument& e) {
    throw ArgError(1, "json_text", e.what());  // a caller's mistake, not a runtime failure
  }
}

int l_jsonl_close(lua_State* L) {
  check_jsonl(L).close();
  return 0;
}

int l_jsonl_path(lua_State* L) {
  const std::string& p = check_jsonl(L).path();
  lua_pushlstring(L, p.data(), p.size());
  return 1;
}

// ---- text server (rl.metrics.serve) -------------------------------------------------
int l_text_serve(lua_State* L) {
  arg::table(L, 1, "opts");
  net::TextServer::Options o;
  o.name = "metrics server";
  if (auto v = arg::field_string(L, 1, "host", "opts")) o.host = std::string(*v);
  if (auto v = arg::field_integer(L, 1, "port", "opts")) {
    if (*v < 0 || *v > 65535) throw ArgError(0, "opts.port", "integer 0-65535 expected");
    o.port = static_cast<int>(*v);
  }
  o.allow_remote = arg::field_boolean(L, 1, "allow_remote", "opts").value_or(false);
  if (auto v = arg::field_string(L, 1, "not_found_hint", "opts")) o.not_found_hint = std::string(*v);
  std::unique_ptr<net::TextServer> s;
  std::string err;
  try {
    s = std::make_unique<net::TextServer>(o);
  } catch (const std::exception& e) {
    err = e.what();
  }
  if (!s) return fail(L, err);
  void* mem = lua_newuserdata(L, sizeof(TextServerBox));
  auto* box = new (mem) TextServerBox{};
  registry_get(L, &kTextServerMt);
  lua_setmetatable(L, -2);
  box->s = std::move(s);
  return 1;
}

net::TextServer& check_text_server(lua_State* L) {
  auto* box = static_cast<TextServerBox*>(check_udata(L, 1, &kTextServerMt, "s", "text server"));
  if (!box->s) throw ArgError(1, "s", "text server already collected");
  return *box->s;
}

int l_ts_set(lua_State* L) {
  net::TextServer& s = check_text_server(L);
  const auto path = method_arg([&] { return arg::string(L, 2, "path"); });
  const auto type = method_arg([&] { return arg::string(L, 3, "content_type"); });
  const auto body = method_arg([&] { return arg::string(L, 4, "body"); });
  s.set(std::string(path), std::string(type), std::string(body));
  return 0;
}

int l_ts_url(lua_State* L) {
  const std::string u = check_text_server(L).url();
  lua_pushlstring(L, u.data(), u.size());
  return 1;
}

int l_ts_port(lua_State* L) {
  lua_pushnumber(L, check_text_server(L).port());
  return 1;
}

int l_ts_stop(lua_State* L) {
  check_text_server(L).stop();
  return 0;
}

}  // namespace

void open_metrics(lua_State* L, int t) {
  static const Reg tb_methods[] = {
      {"add_scalars", entry<l_tb_add_scalars>},
      {"flush", entry<l_tb_flush>},
      {"close", entry<l_tb_close>},
      {"path", entry<l_tb_path>},
  };
  make_metatable(L, &kTensorBoardMt, "rl.metrics.TensorBoardWriter:", tb_methods, std::size(tb_methods),
                 entry<destroy_udata<TensorBoardBox>>);
  static const Reg jsonl_methods[] = {
      {"write", entry<l_jsonl_write>},
      {"close", entry<l_jsonl_close>},
      {"path", entry<l_jsonl_path>},
  };
  make_metatable(L, &kJsonlMt, "rl.metrics.JsonlWriter:", jsonl_methods, std::size(jsonl_methods), entry<destroy_udata<JsonlBox>>);
  static const Reg ts_methods[] = {
      {"set", entry<l_ts_set>},
      {"url", entry<l_ts_url>},
      {"port", entry<l_ts_port>},
      {"stop", entry<l_ts_stop>},
  };
  make_metatable(L, &kTextServerMt, "rl.metrics.Server:", ts_methods, std::size(ts_methods),
                 entry<destroy_udata<TextServerBox>>);
  static const Reg regs[] = {
      {"tensorboard_open", entry<l_tensorboard_open>},
      {"jsonl_open", entry<l_jsonl_open>},
      {"text_serve", entry<l_text_serve>},
  };
  register_functions(L, t, "rl.metrics.", regs);
}

}  // namespace rl::lua
