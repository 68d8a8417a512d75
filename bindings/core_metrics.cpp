// _core.metrics: the metric sinks of runtime/metrics for lua/rl/metrics.lua.
//
//   tensorboard_open(dir [, filename_suffix]) -> w | nil, err
//   w:add_scalars(step, {tag = number, ...} [, wall_time]) -> true | nil, err   (one event per tag, then flush)
//   w:flush() -> true | nil, err      w:close() -> true | nil, err      w:path() -> string
//   jsonl_open(path) -> j | nil, err
//   j:write(json_text) -> true | nil, err   (one line, appended whole)
//   j:close()                               j:path() -> string
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
#include "metrics/tensorboard_writer.hpp"

namespace rl::lua {
namespace {

using metrics::JsonlWriter;
using metrics::Scalar;
using metrics::TensorBoardWriter;

const char kTensorBoardMt = 0;  // registry: metatable of TensorBoard writers
const char kJsonlMt = 0;        // registry: metatable of JSONL writers

struct TensorBoardBox : LiveObject {
  std::unique_ptr<TensorBoardWriter> w;
};
struct JsonlBox : LiveObject {
  std::unique_ptr<JsonlWriter> w;
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
  static const Reg regs[] = {
      {"tensorboard_open", entry<l_tensorboard_open>},
      {"jsonl_open", entry<l_jsonl_open>},
  };
  register_functions(L, t, "rl.metrics.", regs);
}

}  // namespace rl::lua
