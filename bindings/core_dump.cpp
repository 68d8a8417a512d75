// _core.dump: Lua values <-> files in torch.save's format (runtime/pickle), for
// rl.dump. Lua -> Python:
//   nil / rl.json.null -> None; boolean -> bool; string -> str (bytes when not
//   valid UTF-8); number -> int when integral and below 2^63 in magnitude, else
//   float (and always float under a key named in opts.float_keys, so a reward of
//   1.0 stays a float); a table with the rl.json array metatable, or with keys
//   exactly 1..n (n > 0) -> list; any other table -> dict (string / number /
//   boolean keys; opts.key_order first, then numbers, then strings sorted — Lua
//   tables have no order of their own).
// Python -> Lua: None -> rl.json.null; int/float -> number (ints above 2^53
//   round); str/bytes -> string; list/tuple/set -> table with the array
//   metatable; dict -> table; a tensor -> nested arrays of numbers (booleans for
//   bool tensors; a 0-d tensor is a number). An object reachable twice stays one
//   Lua table.
#include <algorithm>
#include <stdexcept>
#include <cmath>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/errors.hpp"
#include "bindings/core_module.hpp"
#include "bindings/trampoline.hpp"
#include "model/unicode.hpp"
#include "pickle/torch_file.hpp"

namespace rl::lua {
namespace {

using pickle::Value;
constexpr int kMaxDepth = 512;
constexpr int64_t kMaxTensorElements = int64_t{1} << 28;

// ---- Lua -> Value ------------------------------------------------------------------

struct Options {
  std::unordered_map<std::string, int> rank;  // key_order: key -> position
  std::unordered_set<std::string> float_keys;
};

// Reads the string array t[field] (absent: nothing) of the options table at `opts`.
std::vector<std::string> string_list(lua_State* L, int opts, const char* field) {
  std::vector<std::string> out;
  lua_getfield(L, opts, field);
  if (lua_isnil(L, -1)) { lua_pop(L, 1); return out; }
  if (!lua_istable(L, -1)) {
    lua_pop(L, 1);
    throw ArgError(3, "opts", std::string("opts.") + field + " must be a list of strings");
  }
  for (int i = 1;; ++i) {
    lua_rawgeti(L, -1, i);
    if (lua_isnil(L, -1)) { lua_pop(L, 1); break; }
    if (lua_type(L, -1) != LUA_TSTRING) {
      lua_pop(L, 2);
      throw ArgError(3, "opts", std::string("opts.") + field + "[" + std::to_string(i) + "] is not a string");
    }
    size_t n;
    const char* s = lua_tolstring(L, -1, &n);
    out.emplace_back(s, n);
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return out;
}

Options read_options(lua_State* L, int idx) {
  Options o;
  if (lua_isnoneornil(L, idx)) return o;
  arg::table(L, idx, "opts");
  int r = 0;
  for (auto& k : string_list(L, idx, "key_order")) o.rank.emplace(std::move(k), r++);
  for (auto& k : string_list(L, idx, "float_keys")) o.float_keys.insert(std::move(k));
  return o;
}

class ToValue {
 public:
  ToValue(lua_State* L, const Options& o) : L_(L), o_(o) {}

  Value convert(int idx, bool as_float, int depth) {
    switch (lua_type(L_, idx)) {
      case LUA_TNIL: return Value();
      case LUA_TBOOLEAN: return Value(static_cast<bool>(lua_toboolean(L_, idx)));
      case LUA_TNUMBER: return number(lua_tonumber(L_, idx), as_float);
      case LUA_TSTRING: {
        size_t n;
        const char* s = lua_tolstring(L_, idx, &n);
        std::string text(s, n);
        if (model::unicode::is_valid_utf8(text)) return Value(std::move(text));
        return pickle::Bytes{std::move(text)};
      }
      case LUA_TLIGHTUSERDATA:
        if (lua_touserdata(L_, idx) == nullptr) return Value();  // rl.json.null
        break;
      case LUA_TTABLE: return table(idx, as_float, depth);
      default: break;
    }
    bad(std::string("cannot save a ") + lua_typename(L_, lua_type(L_, idx)));
  }

 private:
  // A value that cannot be saved is misuse (raised), but not a bad argument of
  // rl.dump.save's own numbering: the message names the place inside the value.
  [[noreturn]] void bad(const std::string& what) {
    std::string p = "$";
    for (const auto& seg : path_) {
      if (seg.key) p += "." + *seg.key;
      else p += "[" + (seg.number == std::floor(seg.number) ? std::to_string(static_cast<int64_t>(seg.number))
                                                           : std::to_string(seg.number)) + "]";
    }
    throw std::invalid_argument(what + " at " + p);
  }

  static Value number(double v, bool as_float) {
    if (!as_float && std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9223372036854775808.0 &&
        !(v == 0 && std::signbit(v)))
      return Value(static_cast<int64_t>(v));
    return Value(v);
  }

  bool is_list(int idx, size_t& n) {
    n = lua_objlen(L_, idx);
    if (lua_getmetatable(L_, idx)) {
      push_json_array_mt(L_);
      const bool arr = lua_rawequal(L_, -1, -2);
      lua_pop(L_, 2);
      if (arr) return true;
    }
    if (n == 0) return false;
    size_t count = 0;
    lua_pushnil(L_);
    while (lua_next(L_, idx)) {
      lua_pop(L_, 1);
      if (lua_type(L_, -1) != LUA_TNUMBER) { lua_pop(L_, 1); return false; }
      ++count;
    }
    return count == n;
  }

  Value table(int idx, bool as_float, int depth) {
    if (depth > kMaxDepth) bad("nested deeper than " + std::to_string(kMaxDepth) + " levels");
    if (!lua_checkstack(L_, 8)) bad("out of Lua stack");
    const void* self = lua_topointer(L_, idx);
    if (std::find(open_.begin(), open_.end(), self) != open_.end()) bad("a table contains itself");
    open_.push_back(self);
    Value out;
    size_t n = 0;
    if (is_list(idx, n)) {
      std::vector<Value> items;
      items.reserve(n);
      for (size_t i = 1; i <= n; ++i) {
        lua_rawgeti(L_, idx, static_cast<int>(i));
        path_.push_back({nullptr, static_cast<double>(i)});
        items.push_back(convert(lua_gettop(L_), as_float, depth + 1));
        path_.pop_back();
        lua_pop(L_, 1);
      }
      out = Value::list(std::move(items));
    } else {
      out = dict(idx, as_float, depth);
    }
    open_.pop_back();
    return out;
  }

  struct Key {
    int rank;     // key_order position; INT_MAX - 1 numbers and booleans, INT_MAX strings
    double num;   // numeric keys sort by value
    std::string text;
    Value key;
  };

  Value dict(int idx, bool as_float, int depth) {
    std::vector<Key> keys;
    lua_pushnil(L_);
    while (lua_next(L_, idx)) {
      lua_pop(L_, 1);
      const int kt = lua_type(L_, -1);
      if (kt == LUA_TSTRING) {
        size_t kn;
        const char* k = lua_tolstring(L_, -1, &kn);
        std::string text(k, kn);
        auto r = o_.rank.find(text);
        keys.push_back({r == o_.rank.end() ? INT32_MAX : r->second, 0, text, Value(text)});
      } else if (kt == LUA_TNUMBER) {
        const double v = lua_tonumber(L_, -1);
        keys.push_back({INT32_MAX - 1, v, {}, number(v, false)});
      } else if (kt == LUA_TBOOLEAN) {
        const bool b = lua_toboolean(L_, -1);
        keys.push_back({INT32_MAX - 1, b ? 1.0 : 0.0, {}, Value(b)});
      } else {
        lua_pop(L_, 1);
        bad(std::string("a table key of type ") + lua_typename(L_, kt) + " (keys must be strings or numbers)");
      }
    }
    std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
      if (a.rank != b.rank) return a.rank < b.rank;
      return a.num != b.num ? a.num < b.num : a.text < b.text;
    });
    std::vector<std::pair<Value, Value>> items;
    items.reserve(keys.size());
    for (auto& k : keys) {
      if (k.key.is(Value::Kind::string)) lua_pushlstring(L_, k.text.data(), k.text.size());
      else if (k.key.is(Value::Kind::boolean)) lua_pushboolean(L_, k.key.as_bool());
      else lua_pushnumber(L_, k.num);
      lua_rawget(L_, idx);
      path_.push_back({k.key.is(Value::Kind::string) ? &k.text : nullptr, k.num});
      const bool child_float = as_float || (!k.text.empty() && o_.float_keys.count(k.text));
      Value v = convert(lua_gettop(L_), child_float, depth + 1);
      path_.pop_back();
      lua_pop(L_, 1);
      items.emplace_back(std::move(k.key), std::move(v));
    }
    return Value::dict(std::move(items));
  }

  lua_State* L_;
  const Options& o_;
  // Where the conversion is, formatted only for an error: a dict key or a list index.
  struct Segment {
    const std::string* key;
    double number;
  };
  std::vector<Segment> path_;
  std::vector<const void*> open_;
};

// ---- Value -> Lua ------------------------------------------------------------------

class ToLua {
 public:
  explicit ToLua(lua_State* L) : L_(L) {
    lua_newtable(L_);  // identity -> table, so shared objects stay shared
    cache_ = lua_gettop(L_);
  }
  ~ToLua() { lua_remove(L_, cache_); }  // leaves the pushed result on top

  void push(const Value& v, int depth) {
    using K = Value::Kind;
    if (depth > kMaxDepth) throw Error("nested deeper than " + std::to_string(kMaxDepth) + " levels");
    if (!lua_checkstack(L_, 8)) throw Error("out of Lua stack");
    switch (v.kind()) {
      case K::none: lua_pushlightuserdata(L_, nullptr); return;
      case K::boolean: lua_pushboolean(L_, v.as_bool()); return;
      case K::integer: case K::big_integer: case K::real: lua_pushnumber(L_, v.to_number()); return;
      case K::string: lua_pushlstring(L_, v.as_string().data(), v.as_string().size()); return;
      case K::bytes: lua_pushlstring(L_, v.as_bytes().data.data(), v.as_bytes().data.size()); return;
      case K::global:
        throw Error("unsupported Python object " + v.as_global().module + "." + v.as_global().name);
      default: break;
    }
    // Containers: reuse the table made for the same object.
    lua_pushlightuserdata(L_, const_cast<void*>(v.identity()));
    lua_rawget(L_, cache_);
    if (!lua_isnil(L_, -1)) return;
    lua_pop(L_, 1);
    if (v.is(K::tensor)) {
      const auto& t = v.as_tensor();
      if (t.shape.empty()) {
        push_element(t, 0);
        return;
      }
      // A stride-0 (expanded) view of one element can claim billions of them.
      if (t.numel() > kMaxTensorElements)
        throw Error("a tensor of " + std::to_string(t.numel()) + " elements is too large to become Lua tables");
      tensor(t, 0, 0);
    } else if (v.is(K::dict)) {
      lua_createtable(L_, 0, static_cast<int>(v.as_dict().items.size()));
      for (const auto& [k, x] : v.as_dict().items) {
        if (k.is_none() || k.is(K::tuple) || k.is(K::list) || k.is(K::dict) || k.is(K::tensor) || k.is(K::global))
          throw Error(std::string("a dict key of type ") + k.type_name() + " has no Lua equivalent");
        if (k.is(K::real) && std::isnan(k.as_float())) throw Error("a dict key is NaN");
        push(k, depth + 1);
        push(x, depth + 1);
        lua_rawset(L_, -3);
      }
    } else {
      const auto& items = v.items();
      lua_createtable(L_, static_cast<int>(items.size()), 0);
      push_json_array_mt(L_);
      lua_setmetatable(L_, -2);
      for (size_t i = 0; i < items.size(); ++i) {
        push(items[i], depth + 1);
        lua_rawseti(L_, -2, static_cast<int>(i + 1));
      }
    }
    lua_pushlightuserdata(L_, const_cast<void*>(v.identity()));
    lua_pushvalue(L_, -2);
    lua_rawset(L_, cache_);
  }

 private:
  void push_element(const pickle::Tensor& t, int64_t flat) {
    const double x = t.element(flat);
    if (t.dtype == pickle::DType::boolean) lua_pushboolean(L_, x != 0);
    else lua_pushnumber(L_, x);
  }

  // Dimension `dim` of `t`, starting at row-major element `base`.
  void tensor(const pickle::Tensor& t, size_t dim, int64_t base) {
    if (!lua_checkstack(L_, 4)) throw Error("out of Lua stack");
    const int64_t n = t.shape[dim];
    int64_t inner = 1;
    for (size_t k = dim + 1; k < t.shape.size(); ++k) inner *= t.shape[k];
    lua_createtable(L_, static_cast<int>(n), 0);
    push_json_array_mt(L_);
    lua_setmetatable(L_, -2);
    for (int64_t i = 0; i < n; ++i) {
      if (dim + 1 == t.shape.size()) push_element(t, base + i);
      else tensor(t, dim + 1, base + i * inner);
      lua_rawseti(L_, -2, static_cast<int>(i + 1));
    }
  }

  lua_State* L_;
  int cache_;
};

// Pushes `v`; on failure restores the stack and returns false with `err` set.
bool push_value(lua_State* L, const Value& v, std::string* err) {
  const int top = lua_gettop(L);
  try {
    ToLua conv(L);
    conv.push(v, 0);
    return true;
  } catch (const std::exception& e) {
    *err = e.what();
  }
  lua_settop(L, top);
  return false;
}

// save(path, value [, {key_order, float_keys}]) -> true | nil, err
int l_save(lua_State* L) {
  const std::string path(arg::string(L, 1, "path"));
  const Options o = read_options(L, 3);
  std::string err;
  {
    const Value v = ToValue(L, o).convert(2, false, 0);
    try {
      pickle::torch_save(v, path);
      lua_pushboolean(L, 1);
      return 1;
    } catch (const Error& e) {
      err = e.what();
    }
  }
  return fail(L, err);
}

// encode(value [, opts]) -> the bytes of a .pt file (archive "archive", or opts.archive)
int l_encode(lua_State* L) {
  const Options o = read_options(L, 2);
  std::string archive = "archive";
  if (!lua_isnoneornil(L, 2)) archive = std::string(arg::field_string(L, 2, "archive", "opts").value_or("archive"));
  std::string bytes;
  {
    const Value v = ToValue(L, o).convert(1, false, 0);
    bytes = pickle::torch_save_bytes(v, archive);
  }
  lua_pushlstring(L, bytes.data(), bytes.size());
  return 1;
}

// load(path) -> value | nil, err ; decode(bytes [, name]) -> value | nil, err
int load_common(lua_State* L, const std::string* path, std::string_view bytes, const std::string& name) {
  std::string err;
  {
    try {
      const Value v = path ? pickle::torch_load(*path) : pickle::torch_load_bytes(bytes, name);
      if (push_value(L, v, &err)) return 1;
      err = name + ": " + err;
    } catch (const Error& e) {
      err = e.what();
    }
  }
  return fail(L, err);
}

int l_load(lua_State* L) {
  const std::string path(arg::string(L, 1, "path"));
  return load_common(L, &path, {}, path);
}

int l_decode(lua_State* L) {
  const auto bytes = arg::string(L, 1, "bytes");
  const std::string name(arg::opt_string(L, 2, "name").value_or("<bytes>"));
  return load_common(L, nullptr, bytes, name);
}

}  // namespace

void open_dump(lua_State* L, int t) {
  static const Reg regs[] = {
      {"save", entry<l_save>},
      {"load", entry<l_load>},
      {"encode", entry<l_encode>},
      {"decode", entry<l_decode>},
  };
  register_functions(L, t, "rl.dump.", regs);
}

}  // namespace rl::lua
