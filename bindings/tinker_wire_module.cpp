// librlhost_tinker.so: the Tinker API's protobuf bodies for lua/rl/tinker_wire.lua, loaded
// by `require "rlhost_tinker"` on first use (so that only a process serving Tinker loads
// libprotobuf). Host symbols (trampoline, the rl.json array metatable) resolve to the
// rlhost binary's own.
//
//   decode_forward_backward(bytes) -> request | nil, err
//   encode_forward_backward_output(output) -> bytes
//   encode_sample_response(response) -> bytes
//
// Tables as lua/rl/tinker_wire.lua documents them. Lists carry the rl.json array
// metatable (they encode as JSON lists even when empty). A tensor given to an encoder is
// {dtype = "float32"|"int64", shape = {...}, data = {...}} or a plain list of numbers
// (float32, 1-D). Bad tables raise, naming the field.
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "bindings/core_module.hpp"
#include "bindings/trampoline.hpp"
#include "tinker/wire.hpp"

namespace rl::lua {
namespace {

namespace tk = rl::tinker;

// ---- C++ -> Lua --------------------------------------------------------------------

void new_list(lua_State* L, size_t n) {
  lua_createtable(L, static_cast<int>(n), 0);
  push_json_array_mt(L);
  lua_setmetatable(L, -2);
}

template <class T>
void push_numbers(lua_State* L, const std::vector<T>& v) {
  new_list(L, v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    lua_pushnumber(L, static_cast<lua_Number>(v[i]));
    lua_rawseti(L, -2, static_cast<int>(i + 1));
  }
}

void push_tensor(lua_State* L, const tk::Tensor& t) {
  lua_createtable(L, 0, 3);
  set_string(L, "dtype", tk::dtype_name(t.dtype));
  push_numbers(L, t.shape);
  lua_setfield(L, -2, "shape");
  if (t.dtype == tk::DType::Float32) push_numbers(L, t.f32);
  else push_numbers(L, t.i64);
  lua_setfield(L, -2, "data");
}

// A Lua number holds integers exactly up to 2^53: an int64 tensor beyond that is refused
// rather than rounded. "" when every value fits.
std::string inexact_int64(const tk::ForwardBackwardRequest& r) {
  constexpr int64_t kExact = int64_t{1} << 53;
  for (size_t i = 0; i < r.data.size(); ++i) {
    for (const auto& [name, t] : r.data[i].loss_fn_inputs) {
      for (size_t j = 0; j < t.i64.size(); ++j) {
        if (t.i64[j] > kExact || t.i64[j] < -kExact) {
          return "ForwardBackwardRequest.data[" + std::to_string(i) + "].loss_fn_inputs['" + name + "']: value " +
                 std::to_string(t.i64[j]) + " at [" + std::to_string(j) + "] is beyond 2^53, which a Lua number cannot hold exactly";
        }
      }
    }
  }
  return "";
}

int l_decode_forward_backward(lua_State* L) {
  const std::string_view bytes = arg::string(L, 1, "bytes");
  tk::ForwardBackwardRequest r;
  try {
    r = tk::decode_forward_backward_request(bytes);
  } catch (const tk::WireError& e) {
    return fail(L, e.what());
  }
  if (std::string why = inexact_int64(r); !why.empty()) return fail(L, why);
  lua_createtable(L, 0, 6);
  set_string(L, "model_id", r.model_id);
  set_number(L, "seq_id", r.seq_id);
  set_string(L, "loss_fn", r.loss_fn);
  set_bool(L, "forward_only", r.forward_only);
  lua_createtable(L, 0, static_cast<int>(r.loss_fn_config.size()));
  for (const auto& [k, v] : r.loss_fn_config) {
    if (v.is_text) set_string(L, k.c_str(), v.text);
    else set_number(L, k.c_str(), v.number);
  }
  lua_setfield(L, -2, "loss_fn_config");
  new_list(L, r.data.size());
  for (size_t i = 0; i < r.data.size(); ++i) {
    const tk::Datum& d = r.data[i];
    lua_createtable(L, 0, 3);
    push_numbers(L, d.tokens);
    lua_setfield(L, -2, "tokens");
    push_numbers(L, d.chunk_lengths);
    lua_setfield(L, -2, "chunk_lengths");
    lua_createtable(L, 0, static_cast<int>(d.loss_fn_inputs.size()));
    for (const auto& [name, t] : d.loss_fn_inputs) {
      push_tensor(L, t);
      lua_setfield(L, -2, name.c_str());
    }
    lua_setfield(L, -2, "loss_fn_inputs");
    lua_rawseti(L, -2, static_cast<int>(i + 1));
  }
  lua_setfield(L, -2, "data");
  return 1;
}

// ---- Lua -> C++ --------------------------------------------------------------------
// `where` names the value for errors: "output.loss_fn_outputs[2].logprobs.data".

[[noreturn]] void bad(const std::string& where, const std::string& what) { throw ArgError(1, where, what); }

// The list at `idx` (absolute); its length.
size_t check_list(lua_State* L, int idx, const std::string& where) {
  if (!lua_istable(L, idx)) bad(where, std::string("list expected, got ") + arg::type_name(L, idx));
  return lua_objlen(L, idx);
}

double number_at(lua_State* L, int t, size_t i, const std::string& where) {
  lua_rawgeti(L, t, static_cast<int>(i + 1));
  if (lua_type(L, -1) != LUA_TNUMBER) {
    const std::string got = arg::type_name(L, -1);
    lua_pop(L, 1);
    bad(where + "[" + std::to_string(i + 1) + "]", "number expected, got " + got);
  }
  const double v = lua_tonumber(L, -1);
  lua_pop(L, 1);
  return v;
}

template <class I>
I integer_value(double v, const std::string& where) {
  if (!(v == std::floor(v)) || v < static_cast<double>(std::numeric_limits<I>::min()) ||
      v > static_cast<double>(std::numeric_limits<I>::max())) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    bad(where, std::string("integer in range expected, got ") + buf);
  }
  return static_cast<I>(v);
}

template <class I>
std::vector<I> integer_list(lua_State* L, int idx, const std::string& where) {
  const size_t n = check_list(L, idx, where);
  std::vector<I> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = integer_value<I>(number_at(L, idx, i, where), where + "[" + std::to_string(i + 1) + "]");
  return out;
}

// Floats; rl.json.null (a NULL light userdata) reads as NaN when `null_is_nan`.
std::vector<float> float_list(lua_State* L, int idx, const std::string& where, bool null_is_nan = false) {
  const size_t n = check_list(L, idx, where);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    lua_rawgeti(L, idx, static_cast<int>(i + 1));
    if (null_is_nan && lua_islightuserdata(L, -1) && lua_touserdata(L, -1) == nullptr) {
      out[i] = std::numeric_limits<float>::quiet_NaN();
    } else if (lua_type(L, -1) == LUA_TNUMBER) {
      out[i] = static_cast<float>(lua_tonumber(L, -1));
    } else {
      const std::string got = arg::type_name(L, -1);
      lua_pop(L, 1);
      bad(where + "[" + std::to_string(i + 1) + "]", std::string("number expected") + (null_is_nan ? " (or rl.json.null)" : "") +
                                                           ", got " + got);
    }
    lua_pop(L, 1);
  }
  return out;
}

// Pushes t[key] (absolute index t); true when it is not nil.
bool field(lua_State* L, int t, const char* key) {
  lua_getfield(L, t, key);
  if (lua_isnil(L, -1)) { lua_pop(L, 1); return false; }
  return true;
}

tk::Tensor read_tensor(lua_State* L, int idx, const std::string& where) {
  if (!lua_istable(L, idx)) bad(where, std::string("tensor table or list of numbers expected, got ") + arg::type_name(L, idx));
  tk::Tensor t;
  lua_getfield(L, idx, "data");
  const bool plain = lua_isnil(L, -1);
  lua_pop(L, 1);
  if (plain) {  // a plain list: float32, 1-D
    t.f32 = float_list(L, idx, where);
    t.shape = {static_cast<int64_t>(t.f32.size())};
    return t;
  }
  std::string dtype = "float32";
  if (field(L, idx, "dtype")) {
    if (lua_type(L, -1) != LUA_TSTRING) bad(where + ".dtype", "\"float32\" or \"int64\" expected");
    dtype = lua_tostring(L, -1);
    lua_pop(L, 1);
  }
  lua_getfield(L, idx, "data");
  const int d = lua_gettop(L);
  if (dtype == "float32") {
    t.f32 = float_list(L, d, where + ".data");
  } else if (dtype == "int64") {
    t.dtype = tk::DType::Int64;
    t.i64 = integer_list<int64_t>(L, d, where + ".data");
  } else {
    bad(where + ".dtype", "\"float32\" or \"int64\" expected, got \"" + dtype + "\"");
  }
  lua_pop(L, 1);
  if (field(L, idx, "shape")) {
    t.shape = integer_list<int64_t>(L, lua_gettop(L), where + ".shape");
    lua_pop(L, 1);
  } else {
    t.shape = {static_cast<int64_t>(t.size())};
  }
  return t;
}

int l_encode_forward_backward_output(lua_State* L) {
  arg::table(L, 1, "output");
  tk::ForwardBackwardOutput out;
  if (auto s = arg::field_string(L, 1, "loss_fn_output_type", "output")) out.loss_fn_output_type = std::string(*s);
  if (field(L, 1, "metrics")) {
    const int m = lua_gettop(L);
    if (!lua_istable(L, m)) bad("output.metrics", "table of numbers expected");
    lua_pushnil(L);
    while (lua_next(L, m)) {
      if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TNUMBER) {
        bad("output.metrics", "string keys and number values expected");
      }
      out.metrics[lua_tostring(L, -2)] = lua_tonumber(L, -1);
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  if (field(L, 1, "loss_fn_outputs")) {
    const int list = lua_gettop(L);
    const size_t n = check_list(L, list, "output.loss_fn_outputs");
    out.loss_fn_outputs.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const std::string where = "output.loss_fn_outputs[" + std::to_string(i + 1) + "]";
      lua_rawgeti(L, list, static_cast<int>(i + 1));
      const int d = lua_gettop(L);
      if (!lua_istable(L, d)) bad(where, std::string("table of named tensors expected, got ") + arg::type_name(L, d));
      lua_pushnil(L);
      while (lua_next(L, d)) {
        if (lua_type(L, -2) != LUA_TSTRING) bad(where, "tensor names must be strings");
        const std::string name = lua_tostring(L, -2);
        out.loss_fn_outputs[i][name] = read_tensor(L, lua_gettop(L), where + "." + name);
        lua_pop(L, 1);
      }
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  std::string bytes;
  try {
    bytes = tk::encode_forward_backward_output(out);
  } catch (const tk::WireError& e) {
    throw ArgError(1, "output", e.what());
  }
  lua_pushlstring(L, bytes.data(), bytes.size());
  return 1;
}

// {k = n, token_ids = {...}, logprobs = {...}} at the top of the stack.
tk::TopkLogprobs read_topk(lua_State* L, const std::string& where) {
  const int t = lua_gettop(L);
  if (!lua_istable(L, t)) bad(where, std::string("table {k, token_ids, logprobs} expected, got ") + arg::type_name(L, t));
  tk::TopkLogprobs k;
  k.k = static_cast<uint32_t>(arg::field_integer(L, t, "k", where.c_str()).value_or(0));
  if (!field(L, t, "token_ids")) bad(where + ".token_ids", "list expected");
  k.token_ids = integer_list<int32_t>(L, lua_gettop(L), where + ".token_ids");
  lua_pop(L, 1);
  if (!field(L, t, "logprobs")) bad(where + ".logprobs", "list expected");
  k.logprobs = float_list(L, lua_gettop(L), where + ".logprobs");
  lua_pop(L, 1);
  return k;
}

int l_encode_sample_response(lua_State* L) {
  arg::table(L, 1, "response");
  tk::SampleResponse r;
  if (!field(L, 1, "sequences")) bad("response.sequences", "list expected");
  const int list = lua_gettop(L);
  const size_t n = check_list(L, list, "response.sequences");
  r.sequences.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string where = "response.sequences[" + std::to_string(i + 1) + "]";
    tk::SampledSequence& s = r.sequences[i];
    lua_rawgeti(L, list, static_cast<int>(i + 1));
    const int q = lua_gettop(L);
    if (!lua_istable(L, q)) bad(where, std::string("table expected, got ") + arg::type_name(L, q));
    if (!field(L, q, "tokens")) bad(where + ".tokens", "list of token ids expected");
    s.tokens = integer_list<int32_t>(L, lua_gettop(L), where + ".tokens");
    lua_pop(L, 1);
    const std::string stop(arg::field_string(L, q, "stop_reason", where.c_str()).value_or("stop"));
    if (stop == "length") s.stop_reason = tk::StopReason::Length;
    else if (stop != "stop") bad(where + ".stop_reason", "\"stop\" or \"length\" expected, got \"" + stop + "\"");
    if (field(L, q, "logprobs")) {
      s.logprobs = float_list(L, lua_gettop(L), where + ".logprobs");
      lua_pop(L, 1);
    }
    if (field(L, q, "topk")) {
      s.topk = read_topk(L, where + ".topk");
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  if (field(L, 1, "prompt_logprobs")) {
    r.prompt_logprobs = float_list(L, lua_gettop(L), "response.prompt_logprobs", true);
    lua_pop(L, 1);
  }
  if (field(L, 1, "topk_prompt_logprobs")) {
    r.topk_prompt_logprobs = read_topk(L, "response.topk_prompt_logprobs");
    lua_pop(L, 1);
  }
  if (auto h = arg::field_integer(L, 1, "prompt_cache_hit_tokens", "response")) {
    r.prompt_cache_hit_tokens = integer_value<int32_t>(static_cast<double>(*h), "response.prompt_cache_hit_tokens");
  }
  std::string bytes;
  try {
    bytes = tk::encode_sample_response(r);
  } catch (const tk::WireError& e) {
    throw ArgError(1, "response", e.what());
  }
  lua_pushlstring(L, bytes.data(), bytes.size());
  return 1;
}

}  // namespace
}  // namespace rl::lua

extern "C" __attribute__((visibility("default"))) int luaopen_rlhost_tinker(lua_State* L) {
  using namespace rl::lua;
  static const Reg regs[] = {
      {"decode_forward_backward", entry<l_decode_forward_backward>},
      {"encode_forward_backward_output", entry<l_encode_forward_backward_output>},
      {"encode_sample_response", entry<l_encode_sample_response>},
  };
  lua_newtable(L);
  register_functions(L, -1, "rl.tinker_wire.", regs);
  return 1;
}
