// The one trampoline every Lua-callable C++ function goes through.
//
//   static int l_request(lua_State* L) { ...decode with arg::*, call runtime, push... }
//   lua::Reg{"http_request", lua::entry<l_request>}
//
// Rules (docs/architecture.md, "The Lua ⇄ C++ boundary"):
//  * Inside Fn, decode arguments with the arg:: helpers below: they throw a C++
//    ArgError instead of raising a Lua error, so no Lua error ever unwinds
//    through live C++ objects of ours.
//  * entry<Fn> catches everything (ArgError, std::exception, c10::Error via a
//    registered translator, anything else), lets every C++ object of that call
//    die, copies the message into a plain buffer, and only then calls lua_error
//    with "<function>: <message>".
//  * Runtime failures are not errors: return fail(L, msg) to give Lua `nil, err`.
//  * A Lua error raised by Lua code we call back into is caught by
//    call_protected() and rethrown as LuaCallError, so it too unwinds C++ first.
#pragma once

#include <lua.hpp>

#include <cstdint>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace rl::lua {

// LuaJIT (5.1 API) has no lua_absindex.
inline int abs_index(lua_State* L, int i) { return (i > 0 || i <= LUA_REGISTRYINDEX) ? i : lua_gettop(L) + i + 1; }

// A bad argument: index (1-based, 0 if unknown), its name, what was expected.
class ArgError : public std::runtime_error {
 public:
  ArgError(int index, std::string name, const std::string& message)
      : std::runtime_error(message), index(index), name(std::move(name)) {}
  int index;
  std::string name;
};

// An error raised by Lua code called from C++ (message includes the traceback).
class LuaCallError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Modules (e.g. the torch module for c10::Error) register translators that turn
// an exception into a message. A translator rethrows `e` inside try/catch and
// returns true when it recognised it.
using ExceptionTranslator = bool (*)(std::exception_ptr e, std::string& message);
void add_exception_translator(ExceptionTranslator t);

// Message for the exception being handled (call inside a catch block).
std::string describe_current_exception();

// Formats "<function>: bad argument #<i> '<name>' (<message>)" etc. into buf.
void format_error(lua_State* L, std::string_view message, const ArgError* arg, char* buf, size_t cap);

namespace detail {
bool is_foreign_exception();  // a Lua error in flight (LuaJIT unwinds with foreign exceptions)
}

template <int (*Fn)(lua_State*)>
int entry(lua_State* L) {
  char buf[2048];  // plain storage: nothing here needs destroying before lua_error
  buf[0] = 0;
  {
    try {
      return Fn(L);
    } catch (const ArgError& e) {
      format_error(L, e.what(), &e, buf, sizeof buf);
    } catch (...) {
      if (detail::is_foreign_exception()) throw;  // a Lua error: let LuaJIT handle it
      std::string msg = describe_current_exception();
      format_error(L, msg, nullptr, buf, sizeof buf);
    }
  }  // every C++ object of this call is gone here
  lua_pushstring(L, buf);
  return lua_error(L);
}

// Registration: each function becomes a closure whose upvalue is its public name
// (used in error messages), e.g. "rl.http.request".
struct Reg {
  const char* name;
  lua_CFunction fn;
};
// Sets t[name] = fn for each reg into the table at `table_idx`; `prefix` builds
// the public names ("rl.json." + "encode").
void register_functions(lua_State* L, int table_idx, std::string_view prefix, const Reg* regs, size_t n);
template <size_t N>
void register_functions(lua_State* L, int table_idx, std::string_view prefix, const Reg (&regs)[N]) {
  register_functions(L, table_idx, prefix, regs, N);
}

// Userdata types: a metatable registered under `key` with `methods` as __index
// (public names `prefix` + name, e.g. "rl.http.Server:") and `gc` as __gc.
void make_metatable(lua_State* L, const void* key, const char* prefix, const Reg* methods, size_t n, lua_CFunction gc);
// The __gc of a userdata that holds a T built in place (placement new): runs ~T.
template <class T>
int destroy_udata(lua_State* L) {
  if (auto* p = static_cast<T*>(lua_touserdata(L, 1))) p->~T();
  return 0;
}
// The userdata at idx if its metatable is the one registered under `key`; else an
// ArgError naming argument `name` and saying `what` was expected.
void* check_udata(lua_State* L, int idx, const void* key, const char* name, const char* what);
// The same without the error: nullptr when idx holds something else.
void* test_udata(lua_State* L, int idx, const void* key);

// Per-state slots in the Lua registry, keyed by the address of a static object
// (`static const char kKey = 0; registry_get(L, &kKey)`).
inline void registry_get(lua_State* L, const void* key) {  // pushes registry[key]
  lua_pushlightuserdata(L, const_cast<void*>(key));
  lua_rawget(L, LUA_REGISTRYINDEX);
}
inline void registry_set(lua_State* L, const void* key) {  // registry[key] = value on top (popped)
  lua_pushlightuserdata(L, const_cast<void*>(key));
  lua_insert(L, -2);
  lua_rawset(L, LUA_REGISTRYINDEX);
}
// The userdata pointer stored at registry[key], or nullptr.
template <class T>
T* registry_pointer(lua_State* L, const void* key) {
  registry_get(L, key);
  auto* p = static_cast<T*>(lua_touserdata(L, -1));
  lua_pop(L, 1);
  return p;
}

// t[key] = value for the table on top of the stack (results built in C++).
inline void set_number(lua_State* L, const char* key, double v) { lua_pushnumber(L, v); lua_setfield(L, -2, key); }
inline void set_bool(lua_State* L, const char* key, bool v) { lua_pushboolean(L, v); lua_setfield(L, -2, key); }
inline void set_string(lua_State* L, const char* key, std::string_view v) {
  lua_pushlstring(L, v.data(), v.size());
  lua_setfield(L, -2, key);
}

// `nil, message` for runtime failures.
int fail(lua_State* L, std::string_view message);

// ---- argument decoding (throws ArgError) ------------------------------------
namespace arg {
const char* type_name(lua_State* L, int idx);
double number(lua_State* L, int idx, const char* name);
int64_t integer(lua_State* L, int idx, const char* name);
std::string_view string(lua_State* L, int idx, const char* name);
bool boolean(lua_State* L, int idx, const char* name);
void table(lua_State* L, int idx, const char* name);
void function(lua_State* L, int idx, const char* name);
std::optional<double> opt_number(lua_State* L, int idx, const char* name);
std::optional<int64_t> opt_integer(lua_State* L, int idx, const char* name);
std::optional<std::string_view> opt_string(lua_State* L, int idx, const char* name);
std::optional<bool> opt_boolean(lua_State* L, int idx, const char* name);
// A CPU list as taskset writes it ("0-3,6"): the CPUs, each one this machine has.
std::vector<int> cpu_list(lua_State* L, int idx, const char* name);

// Fields of an options table at `t` (absolute index); names like "opts.url".
std::optional<std::string_view> field_string(lua_State* L, int t, const char* key, const char* table_name);
std::optional<double> field_number(lua_State* L, int t, const char* key, const char* table_name);
std::optional<int64_t> field_integer(lua_State* L, int t, const char* key, const char* table_name);
std::optional<bool> field_boolean(lua_State* L, int t, const char* key, const char* table_name);
}  // namespace arg

// ---- calling back into Lua ---------------------------------------------------
// The host's one protected call: runs the function below `nargs` arguments on
// the stack with a traceback handler. On error returns false and sets `error`
// (message + traceback); the stack is left with `nresults` values on success and
// nothing on failure.
bool call_protected(lua_State* L, int nargs, int nresults, std::string* error);
// Same, but throws LuaCallError: for C++ code (inside entry<>) that calls Lua.
void call_or_throw(lua_State* L, int nargs, int nresults);

}  // namespace rl::lua
