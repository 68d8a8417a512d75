#include "bindings/trampoline.hpp"

#include <cxxabi.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "base/cpu_set.hpp"

namespace rl::lua {

namespace {
std::vector<ExceptionTranslator>& translators() {
  static std::vector<ExceptionTranslator> t;
  return t;
}
std::mutex translators_mu;

// Copies at most cap-1 bytes; never splits the buffer mid-way without a NUL.
void copy_into(char* buf, size_t cap, std::string_view s) {
  size_t n = std::min(cap - 1, s.size());
  std::memcpy(buf, s.data(), n);
  buf[n] = 0;
}
}  // namespace

void add_exception_translator(ExceptionTranslator t) {
  std::lock_guard<std::mutex> lock(translators_mu);
  translators().push_back(t);
}

namespace detail {
bool is_foreign_exception() { return abi::__cxa_current_exception_type() == nullptr; }
}  // namespace detail

std::string describe_current_exception() {
  auto e = std::current_exception();
  {
    std::lock_guard<std::mutex> lock(translators_mu);
    for (auto t : translators()) {
      std::string msg;
      if (t(e, msg)) return msg;
    }
  }
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    const std::type_info* ti = abi::__cxa_current_exception_type();
    return std::string("unknown C++ exception") + (ti ? std::string(" of type ") + ti->name() : "");
  }
}

static const char* function_name(lua_State* L) {
  const char* name = lua_tostring(L, lua_upvalueindex(1));
  return name ? name : "?";
}

void format_error(lua_State* L, std::string_view message, const ArgError* arg, char* buf, size_t cap) {
  std::string out = function_name(L);
  out += ": ";
  if (arg) {
    out += "bad argument ";
    if (arg->index > 0) out += "#" + std::to_string(arg->index) + " ";
    if (!arg->name.empty()) out += "'" + arg->name + "' ";
    out += "(";
    out += message;
    out += ")";
  } else {
    out += message;
  }
  copy_into(buf, cap, out);
}

void register_functions(lua_State* L, int table_idx, std::string_view prefix, const Reg* regs, size_t n) {
  table_idx = abs_index(L, table_idx);
  for (size_t i = 0; i < n; ++i) {
    std::string full(prefix);
    full += regs[i].name;
    lua_pushlstring(L, full.data(), full.size());
    lua_pushcclosure(L, regs[i].fn, 1);
    lua_setfield(L, table_idx, regs[i].name);
  }
}

int fail(lua_State* L, std::string_view message) {
  lua_pushnil(L);
  lua_pushlstring(L, message.data(), message.size());
  return 2;
}

// ---- arguments ---------------------------------------------------------------
namespace arg {

const char* type_name(lua_State* L, int idx) { return lua_typename(L, lua_type(L, idx)); }

[[noreturn]] static void type_error(lua_State* L, int idx, const char* name, const char* expected) {
  throw ArgError(idx, name ? name : "", std::string(expected) + " expected, got " + type_name(L, idx));
}

double number(lua_State* L, int idx, const char* name) {
  if (lua_type(L, idx) != LUA_TNUMBER) type_error(L, idx, name, "number");
  return lua_tonumber(L, idx);
}

static int64_t to_integer(lua_State* L, int idx, const char* name, double v) {
  if (std::floor(v) != v || std::fabs(v) > 9007199254740992.0)
    throw ArgError(idx, name ? name : "", "integer expected, got " + std::to_string(v));
  return static_cast<int64_t>(v);
}

int64_t integer(lua_State* L, int idx, const char* name) {
  return to_integer(L, idx, name, number(L, idx, name));
}

std::string_view string(lua_State* L, int idx, const char* name) {
  if (lua_type(L, idx) != LUA_TSTRING) type_error(L, idx, name, "string");
  size_t len = 0;
  const char* s = lua_tolstring(L, idx, &len);
  return {s, len};
}

std::vector<int> cpu_list(lua_State* L, int idx, const char* name) {
  const std::string_view spec = string(L, idx, name);
  try {
    auto cpus = parse_cpu_list(spec);
    check_cpus_exist(cpus);
    return cpus;
  } catch (const std::exception& e) {
    throw ArgError(idx, name, e.what());
  }
}

bool boolean(lua_State* L, int idx, const char* name) {
  if (lua_type(L, idx) != LUA_TBOOLEAN) type_error(L, idx, name, "boolean");
  return lua_toboolean(L, idx) != 0;
}

void table(lua_State* L, int idx, const char* name) {
  if (lua_type(L, idx) != LUA_TTABLE) type_error(L, idx, name, "table");
}

void function(lua_State* L, int idx, const char* name) {
  if (lua_type(L, idx) != LUA_TFUNCTION) type_error(L, idx, name, "function");
}

std::optional<double> opt_number(lua_State* L, int idx, const char* name) {
  if (lua_isnoneornil(L, idx)) return std::nullopt;
  return number(L, idx, name);
}
std::optional<int64_t> opt_integer(lua_State* L, int idx, const char* name) {
  if (lua_isnoneornil(L, idx)) return std::nullopt;
  return integer(L, idx, name);
}
std::optional<std::string_view> opt_string(lua_State* L, int idx, const char* name) {
  if (lua_isnoneornil(L, idx)) return std::nullopt;
  return string(L, idx, name);
}
std::optional<bool> opt_boolean(lua_State* L, int idx, const char* name) {
  if (lua_isnoneornil(L, idx)) return std::nullopt;
  return boolean(L, idx, name);
}

// Field helpers leave the stack balanced (strings stay valid: the table holds them).
template <class T, class Get>
static std::optional<T> field(lua_State* L, int t, const char* key, const char* table_name, Get get) {
  lua_getfield(L, t, key);
  std::string name = std::string(table_name) + "." + key;
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return std::nullopt;
  }
  // Decode at -1, but report the field name rather than a stack index.
  std::optional<T> out;
  try {
    out = get(L, lua_gettop(L), name.c_str());
  } catch (ArgError& e) {
    lua_pop(L, 1);
    throw ArgError(0, name, e.what());
  }
  lua_pop(L, 1);
  return out;
}

std::optional<std::string_view> field_string(lua_State* L, int t, const char* key, const char* table_name) {
  return field<std::string_view>(L, t, key, table_name, string);
}
std::optional<double> field_number(lua_State* L, int t, const char* key, const char* table_name) {
  return field<double>(L, t, key, table_name, number);
}
std::optional<int64_t> field_integer(lua_State* L, int t, const char* key, const char* table_name) {
  return field<int64_t>(L, t, key, table_name, integer);
}
std::optional<bool> field_boolean(lua_State* L, int t, const char* key, const char* table_name) {
  return field<bool>(L, t, key, table_name, boolean);
}

}  // namespace arg

// ---- calls into Lua ------------------------------------------------------------
static int traceback_handler(lua_State* L) {
  const char* msg = lua_tostring(L, 1);
  if (!msg) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
    msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  luaL_traceback(L, L, msg, 1);
  return 1;
}

// The handler closure is created once per state and kept in the registry:
// lua_pushcfunction would allocate a new closure on every call.
static const char kTracebackKey = 0;

static void push_traceback_handler(lua_State* L) {
  registry_get(L, &kTracebackKey);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_pushcfunction(L, traceback_handler);
    lua_pushvalue(L, -1);
    registry_set(L, &kTracebackKey);
  }
}

bool call_protected(lua_State* L, int nargs, int nresults, std::string* error) {
  const int base = lua_gettop(L) - nargs;  // the function's index
  push_traceback_handler(L);
  lua_insert(L, base);
  const int rc = lua_pcall(L, nargs, nresults, base);
  if (rc != 0) {
    if (error) {
      size_t len = 0;
      const char* m = lua_tolstring(L, -1, &len);
      error->assign(m ? m : "(non-string error)", m ? len : 18);
    }
    lua_settop(L, base - 1);  // drop handler and error
    return false;
  }
  lua_remove(L, base);  // the handler
  return true;
}

void call_or_throw(lua_State* L, int nargs, int nresults) {
  std::string err;
  if (!call_protected(L, nargs, nresults, &err)) throw LuaCallError(err);
}

void make_metatable(lua_State* L, const void* key, const char* prefix, const Reg* methods, size_t n, lua_CFunction gc) {
  lua_newtable(L);
  lua_newtable(L);
  register_functions(L, lua_gettop(L), prefix, methods, n);
  lua_setfield(L, -2, "__index");
  lua_pushfstring(L, "%s__gc", prefix);
  lua_pushcclosure(L, gc, 1);
  lua_setfield(L, -2, "__gc");
  registry_set(L, key);
}

void* test_udata(lua_State* L, int idx, const void* key) {
  void* p = lua_touserdata(L, idx);
  if (!p || !lua_getmetatable(L, idx)) return nullptr;
  registry_get(L, key);
  const bool same = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  return same ? p : nullptr;
}

void* check_udata(lua_State* L, int idx, const void* key, const char* name, const char* what) {
  if (void* p = test_udata(L, idx, key)) return p;
  throw ArgError(idx, name, std::string(what) + " expected, got " + arg::type_name(L, idx));
}

}  // namespace rl::lua
