// _core.json: JSON text <-> Lua values, without an intermediate DOM.
//   decode: nlohmann's SAX parser pushes straight onto the Lua stack.
//   encode: a direct walk of the Lua value into a string.
// Arrays decode with the rl.json array metatable so `[]` round-trips; JSON null
// is the rl.json.null sentinel (a NULL lightuserdata).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/json_input.hpp"
#include "base/utf8.hpp"
#include "model/unicode.hpp"
#include "bindings/core_module.hpp"
#include "bindings/trampoline.hpp"

namespace rl::lua {
namespace {

const char kArrayMtKey = 0;  // registry key of the array metatable

// The JSON input policy's depth (RLHOST_JSON_MAX_DEPTH) bounds both directions:
// decode builds no deeper, encode recurses no deeper. Sizes are the caller's
// business (rl.json reads the user's own files too).
json_input::Limits decode_limits() { return json_input::file_limits(); }
size_t max_depth() { return json_input::limits().max_depth; }

void push_array_mt(lua_State* L) {
  registry_get(L, &kArrayMtKey);
}

// ---- decode ------------------------------------------------------------------------
class LuaSax {
 public:
  LuaSax(lua_State* L, bool unique_keys) : L_(L), guard_("text", decode_limits()), unique_keys_(unique_keys) {}
  std::string error;

  bool null() { return guard_.scalar() && (lua_pushlightuserdata(L_, nullptr), add()); }
  bool boolean(bool v) { return guard_.scalar() && (lua_pushboolean(L_, v), add()); }
  bool number_integer(int64_t v) { return guard_.scalar() && (lua_pushnumber(L_, static_cast<lua_Number>(v)), add()); }
  bool number_unsigned(uint64_t v) { return guard_.scalar() && (lua_pushnumber(L_, static_cast<lua_Number>(v)), add()); }
  bool number_float(double v, const std::string&) { return guard_.scalar() && (lua_pushnumber(L_, v), add()); }
  bool string(std::string& s) { return guard_.string(s.size()) && (lua_pushlstring(L_, s.data(), s.size()), add()); }
  bool binary(nlohmann::json::binary_t&) { error = "binary values are not supported"; return false; }
  bool start_object(size_t) { return guard_.open(false) && open(false); }
  bool key(std::string& k) {
    if (!guard_.key(k)) return false;
    lua_pushlstring(L_, k.data(), k.size());
    if (unique_keys_) {  // the object is below the key: a key already there is refused
      lua_pushvalue(L_, -1);
      lua_rawget(L_, -3);
      const bool seen = !lua_isnil(L_, -1);
      lua_pop(L_, 1);
      if (seen) return guard_.duplicate_key();
    }
    return true;
  }
  bool end_object() { guard_.close(); frames_.pop_back(); return add(); }
  bool start_array(size_t) { return guard_.open(true) && open(true); }
  bool end_array() { guard_.close(); frames_.pop_back(); return add(); }
  bool parse_error(std::size_t byte, const std::string&, const nlohmann::detail::exception& ex) {
    guard_.parse_error(byte, ex.what());
    return false;
  }
  // Why parsing stopped: a limit or a syntax error (the guard's), or ours.
  std::string reason() const { return !guard_.message().empty() ? guard_.message() : error; }

 private:
  struct Frame { bool array; int index; };
  bool open(bool array) {
    if (!lua_checkstack(L_, 4)) { error = "out of Lua stack"; return false; }
    lua_newtable(L_);
    if (array) { push_array_mt(L_); lua_setmetatable(L_, -2); }
    frames_.push_back({array, 0});
    return true;
  }
  // Stores the value on top into its parent (if any).
  bool add() {
    if (frames_.empty()) return true;
    Frame& f = frames_.back();
    if (f.array) lua_rawseti(L_, -2, ++f.index);
    else lua_rawset(L_, -3);  // parent, key, value
    return true;
  }
  lua_State* L_;
  json_input::Guard guard_;
  bool unique_keys_ = false;
  std::vector<Frame> frames_;
};

// decode(text [, {unique_keys = true}]) -> value | nil, err (unique_keys: a key twice in an object is an error)
int l_decode(lua_State* L) {
  const auto text = arg::string(L, 1, "text");
  bool unique_keys = false;
  if (!lua_isnoneornil(L, 2)) {
    arg::table(L, 2, "opts");
    unique_keys = arg::field_boolean(L, 2, "unique_keys", "opts").value_or(false);
  }
  const int top = lua_gettop(L);
  std::string err;
  {
    LuaSax sax(L, unique_keys);
    const bool ok = nlohmann::json::sax_parse(text.begin(), text.end(), &sax);
    if (ok) return 1;
    err = sax.reason().empty() ? "invalid JSON" : sax.reason();
  }
  lua_settop(L, top);
  return fail(L, "rl.json.decode: " + err);
}

// ---- encode ------------------------------------------------------------------------

struct Encoder {
  lua_State* L = nullptr;
  std::string out;
  int indent = -1;
  bool sort_keys = false;
  std::vector<std::string> path;
  std::vector<const void*> open_tables;  // tables being encoded now, outermost first

  [[noreturn]] void bad(const std::string& what) {
    std::string p = "$";
    for (auto& s : path) p += s;
    throw ArgError(1, "value", what + " at " + p);
  }

  void newline(int depth) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(depth * indent), ' ');
  }

  void string(const char* s, size_t n) {
    out += '"';
    for (size_t i = 0; i < n; ++i) {
      unsigned char c = static_cast<unsigned char>(s[i]);
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
          } else if (c < 0x80) {
            out += static_cast<char>(c);
          } else {
            const size_t len = utf8_sequence_length(s + i, n - i);
            if (len == 0) bad("invalid UTF-8 in string");
            out.append(s + i, len);
            i += len - 1;
          }
      }
    }
    out += '"';
  }

  void number(double v) {
    if (!std::isfinite(v)) bad("cannot encode " + std::string(std::isnan(v) ? "NaN" : "infinity"));
    char buf[32];
    if (std::floor(v) == v && std::fabs(v) < 1e15) {
      std::snprintf(buf, sizeof buf, "%.0f", v);
    } else {
      // the shortest form that reads back as the same double (0.1, not 0.10000000000000001)
      for (int prec = 15; prec <= 17; ++prec) {
        std::snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (std::strtod(buf, nullptr) == v) break;
      }
    }
    out += buf;
  }

  // Array when the array metatable is set, or keys are exactly 1..n (n > 0).
  bool is_array(int idx, size_t& n) {
    if (lua_getmetatable(L, idx)) {
      push_array_mt(L);
      const bool arr = lua_rawequal(L, -1, -2);
      lua_pop(L, 2);
      if (arr) { n = lua_objlen(L, idx); return true; }
    }
    n = lua_objlen(L, idx);
    if (n == 0) return false;
    size_t count = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
      lua_pop(L, 1);
      if (lua_type(L, -1) != LUA_TNUMBER) { lua_pop(L, 1); return false; }
      ++count;
    }
    return count == n;
  }

  void value(int idx, int depth) {
    if (static_cast<size_t>(depth) > max_depth())
      bad("nested deeper than " + std::to_string(max_depth()) + " levels (a cycle?)");
    switch (lua_type(L, idx)) {
      case LUA_TNIL: out += "null"; return;
      case LUA_TBOOLEAN: out += lua_toboolean(L, idx) ? "true" : "false"; return;
      case LUA_TNUMBER: number(lua_tonumber(L, idx)); return;
      case LUA_TSTRING: {
        size_t n;
        const char* s = lua_tolstring(L, idx, &n);
        string(s, n);
        return;
      }
      case LUA_TLIGHTUSERDATA:
        if (lua_touserdata(L, idx) == nullptr) { out += "null"; return; }
        break;
      case LUA_TTABLE: table(idx, depth); return;
      default: break;
    }
    bad(std::string("cannot encode a ") + lua_typename(L, lua_type(L, idx)));
  }

  void table(int idx, int depth) {
    if (!lua_checkstack(L, 6)) bad("out of Lua stack");
    const void* self = lua_topointer(L, idx);
    if (std::find(open_tables.begin(), open_tables.end(), self) != open_tables.end())
      bad("cycle: a table contains itself");
    open_tables.push_back(self);
    table_body(idx, depth);
    open_tables.pop_back();
  }

  void table_body(int idx, int depth) {
    size_t n = 0;
    if (is_array(idx, n)) {
      out += '[';
      for (size_t i = 1; i <= n; ++i) {
        if (i > 1) out += ',';
        newline(depth + 1);
        lua_rawgeti(L, idx, static_cast<int>(i));
        path.push_back("[" + std::to_string(i) + "]");
        value(lua_gettop(L), depth + 1);
        path.pop_back();
        lua_pop(L, 1);
      }
      if (n) newline(depth);
      out += ']';
      return;
    }
    // Object: collect string keys (numbers become their decimal text).
    std::vector<std::pair<std::string, int>> keys;  // key text, registry-free: re-fetch by key
    lua_pushnil(L);
    while (lua_next(L, idx)) {
      lua_pop(L, 1);
      const int kt = lua_type(L, -1);
      if (kt == LUA_TSTRING) {
        size_t kn;
        const char* k = lua_tolstring(L, -1, &kn);
        keys.emplace_back(std::string(k, kn), 0);
      } else if (kt == LUA_TNUMBER) {
        lua_pushvalue(L, -1);
        keys.emplace_back(lua_tostring(L, -1), 1);
        lua_pop(L, 1);
      } else {
        lua_pop(L, 1);
        bad(std::string("table key of type ") + lua_typename(L, kt) + " (keys must be strings)");
      }
    }
    if (sort_keys) std::sort(keys.begin(), keys.end());
    out += '{';
    bool first = true;
    for (auto& [k, numeric] : keys) {
      if (!first) out += ',';
      first = false;
      newline(depth + 1);
      string(k.data(), k.size());
      out += indent >= 0 ? ": " : ":";
      if (numeric) lua_pushnumber(L, std::stod(k)); else lua_pushlstring(L, k.data(), k.size());
      lua_rawget(L, idx);
      path.push_back("." + (k.size() > 40 ? k.substr(0, 40) + "..." : k));  // messages stay short
      value(lua_gettop(L), depth + 1);
      path.pop_back();
      lua_pop(L, 1);
    }
    if (!keys.empty()) newline(depth);
    out += '}';
  }
};

// encode(value [, {indent=n, sort_keys=bool}]) -> text
int l_encode(lua_State* L) {
  Encoder enc;
  enc.L = L;
  if (!lua_isnoneornil(L, 2)) {
    arg::table(L, 2, "opts");
    enc.indent = static_cast<int>(arg::field_integer(L, 2, "indent", "opts").value_or(-1));
    enc.sort_keys = arg::field_boolean(L, 2, "sort_keys", "opts").value_or(false);
  }
  lua_settop(L, 1);
  enc.value(1, 0);
  lua_pushlstring(L, enc.out.data(), enc.out.size());
  return 1;
}

// valid_utf8(s): s with each invalid sequence replaced by U+FFFD (model::unicode's
// from_utf8_lossy rule); s itself when already valid.
int l_valid_utf8(lua_State* L) {
  const std::string_view text = arg::string(L, 1, "s");
  if (model::unicode::is_valid_utf8(text)) {
    lua_settop(L, 1);
    return 1;
  }
  const std::string out = model::unicode::to_valid_utf8(text);
  lua_pushlstring(L, out.data(), out.size());
  return 1;
}

}  // namespace

void push_json_array_mt(lua_State* L) { push_array_mt(L); }

void open_json(lua_State* L, int t) {
  static const Reg regs[] = {
      {"encode", entry<l_encode>},
      {"decode", entry<l_decode>},
      {"valid_utf8", entry<l_valid_utf8>},
  };
  register_functions(L, t, "rl.json.", regs);
  // the array metatable, shared by decode and rl.json.array()
  lua_newtable(L);
  lua_pushstring(L, "array");
  lua_setfield(L, -2, "__jsontype");
  lua_pushvalue(L, -1);
  registry_set(L, &kArrayMtKey);
  lua_setfield(L, t, "array_mt");
  lua_pushlightuserdata(L, nullptr);
  lua_setfield(L, t, "null");
}

}  // namespace rl::lua
