// librlhost_parquet.so: Parquet files for lua/rl/data.lua, loaded by
// `require "rlhost_parquet"` the first time a .parquet file is read (so that only such
// a process loads Arrow). Host symbols (trampoline, the rl.json array metatable)
// resolve to the rlhost binary's own.
//
//   open(path) -> reader | nil, err        (missing, empty, damaged or not Parquet)
//   reader:columns() -> {{name, type, kind}, ...}   (kind: see data/parquet_rows.hpp)
//   reader:num_rows() -> n                 reader:num_row_groups() -> n
//   reader:select({name, ...}) -> true | nil, err   (a missing or unusable column)
//   reader:next() -> rows | false | nil, err        (a batch, <= 4096 rows of one row group; false when done)
//   reader:close()                                  (frees the file now; __gc does too)
//
// Rows are tables {column = value}; lists carry the rl.json array metatable and nulls
// are rl.json.null, as rl.json.decode gives them.
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "bindings/core_module.hpp"
#include "bindings/trampoline.hpp"
#include "data/parquet_rows.hpp"

namespace rl::lua {
namespace {

using data::ParquetError;
using data::ParquetRows;
using nlohmann::json;

const char kReaderMt = 0;  // registry: metatable of readers

struct ReaderBox {
  std::unique_ptr<ParquetRows> r;
};

ParquetRows& check_reader(lua_State* L) {
  auto* box = static_cast<ReaderBox*>(check_udata(L, 1, &kReaderMt, "reader", "Parquet reader"));
  if (!box->r) throw ArgError(1, "reader", "Parquet reader already closed");
  return *box->r;
}

void push_value(lua_State* L, const json& v) {
  if (!lua_checkstack(L, 4)) throw std::runtime_error("value nested too deeply for the Lua stack");
  switch (v.type()) {
    case json::value_t::null: lua_pushlightuserdata(L, nullptr); break;  // rl.json.null
    case json::value_t::boolean: lua_pushboolean(L, v.get<bool>()); break;
    case json::value_t::number_integer: lua_pushnumber(L, static_cast<lua_Number>(v.get<int64_t>())); break;
    case json::value_t::number_unsigned: lua_pushnumber(L, static_cast<lua_Number>(v.get<uint64_t>())); break;
    case json::value_t::number_float: lua_pushnumber(L, v.get<double>()); break;
    case json::value_t::string: {
      const auto& s = v.get_ref<const std::string&>();
      lua_pushlstring(L, s.data(), s.size());
      break;
    }
    case json::value_t::array: {
      lua_createtable(L, static_cast<int>(v.size()), 0);
      push_json_array_mt(L);
      lua_setmetatable(L, -2);
      int i = 0;
      for (const auto& e : v) {
        push_value(L, e);
        lua_rawseti(L, -2, ++i);
      }
      break;
    }
    case json::value_t::object:
      lua_createtable(L, 0, static_cast<int>(v.size()));
      for (const auto& [k, e] : v.items()) {
        lua_pushlstring(L, k.data(), k.size());
        push_value(L, e);
        lua_rawset(L, -3);
      }
      break;
    default:
      lua_pushnil(L);
  }
}

int l_open(lua_State* L) {
  const std::string path(arg::string(L, 1, "path"));
  std::unique_ptr<ParquetRows> r;
  std::string err;
  try {
    r = std::make_unique<ParquetRows>(path);
  } catch (const ParquetError& e) {
    err = e.what();
  }
  if (!r) return fail(L, err);
  void* mem = lua_newuserdata(L, sizeof(ReaderBox));
  auto* box = new (mem) ReaderBox{};
  registry_get(L, &kReaderMt);
  lua_setmetatable(L, -2);  // from here __gc destroys it
  box->r = std::move(r);
  return 1;
}

int l_columns(lua_State* L) {
  const auto& cols = check_reader(L).columns();
  lua_createtable(L, static_cast<int>(cols.size()), 0);
  int i = 0;
  for (const auto& c : cols) {
    lua_createtable(L, 0, 3);
    set_string(L, "name", c.name);
    set_string(L, "type", c.type);
    set_string(L, "kind", c.kind);
    lua_rawseti(L, -2, ++i);
  }
  return 1;
}

int l_num_rows(lua_State* L) {
  lua_pushnumber(L, static_cast<lua_Number>(check_reader(L).num_rows()));
  return 1;
}

int l_num_row_groups(lua_State* L) {
  lua_pushnumber(L, check_reader(L).num_row_groups());
  return 1;
}

int l_select(lua_State* L) {
  ParquetRows& r = check_reader(L);
  if (!lua_istable(L, 2)) throw ArgError(1, "names", std::string("list of column names expected, got ") + arg::type_name(L, 2));
  std::vector<std::string> names;
  for (int i = 1;; ++i) {
    lua_rawgeti(L, 2, i);
    if (lua_isnil(L, -1)) { lua_pop(L, 1); break; }
    if (lua_type(L, -1) != LUA_TSTRING) throw ArgError(1, "names", "names[" + std::to_string(i) + "] is not a string");
    size_t n = 0;
    const char* s = lua_tolstring(L, -1, &n);
    names.emplace_back(s, n);
    lua_pop(L, 1);
  }
  std::string err;
  try {
    r.select(names);
  } catch (const ParquetError& e) {
    err = e.what();
  }
  if (!err.empty()) return fail(L, err);
  lua_pushboolean(L, 1);
  return 1;
}

int l_next(lua_State* L) {
  ParquetRows& r = check_reader(L);
  std::vector<json> rows;
  std::string err;
  bool more = false;
  try {
    more = r.next(rows);
  } catch (const ParquetError& e) {
    err = e.what();
  }
  if (!err.empty()) return fail(L, err);
  if (!more) {
    lua_pushboolean(L, 0);
    return 1;
  }
  lua_createtable(L, static_cast<int>(rows.size()), 0);
  int i = 0;
  for (const auto& row : rows) {
    push_value(L, row);
    lua_rawseti(L, -2, ++i);
  }
  return 1;
}

int l_close(lua_State* L) {
  static_cast<ReaderBox*>(check_udata(L, 1, &kReaderMt, "reader", "Parquet reader"))->r.reset();
  return 0;
}

}  // namespace
}  // namespace rl::lua

extern "C" __attribute__((visibility("default"))) int luaopen_rlhost_parquet(lua_State* L) {
  using namespace rl::lua;
  static const Reg methods[] = {
      {"columns", entry<l_columns>},       {"num_rows", entry<l_num_rows>}, {"num_row_groups", entry<l_num_row_groups>},
      {"select", entry<l_select>},         {"next", entry<l_next>},         {"close", entry<l_close>},
  };
  make_metatable(L, &kReaderMt, "rl.data.ParquetReader:", methods, std::size(methods), entry<destroy_udata<ReaderBox>>);
  static const Reg regs[] = {{"open", entry<l_open>}};
  lua_newtable(L);
  register_functions(L, -1, "rl.data.parquet.", regs);
  return 1;
}
