// _core.tokenizer: rl::model::Tokenizer for lua/rl/tokenizer.lua.
//
//   load(path) -> tok | nil, err
//   tok:encode(text, add_special_tokens) -> {ids}
//   tok:decode({ids}, skip_special_tokens) -> text
//   tok:apply_chat_template(messages_json, kwargs_json) -> text | nil, err
//   tok:token_to_id(s) -> id | nil          tok:id_to_token(id) -> s | nil
//   tok:info() -> {vocab_size, bos_token_id, eos_token_ids, pad_token_id, source, has_chat_template}
//   tok:decoder(skip_special_tokens) -> dec; dec:push(id) -> text; dec:finish() -> text
//
// Ids are the tokenizer's own (0-based) in plain Lua arrays. A decoder holds a
// shared reference to its tokenizer, so either may be collected first.
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/live_objects.hpp"
#include "bindings/core_module.hpp"
#include "bindings/trampoline.hpp"
#include "model/tokenizer.hpp"

namespace rl::lua {
namespace {

using model::Tokenizer;
using TokenizerPtr = std::shared_ptr<const Tokenizer>;

const char kTokenizerMt = 0;  // registry: metatable of tokenizer userdata
const char kDecoderMt = 0;    // registry: metatable of decoder userdata

struct TokenizerBox : LiveObject {
  TokenizerPtr tok;
};

struct DecoderBox : LiveObject {
  TokenizerPtr tok;  // keeps the tokenizer alive while the decoder is
  std::unique_ptr<model::IncrementalDecoder> dec;
};

const Tokenizer& check_tokenizer(lua_State* L, int idx) {
  auto* box = static_cast<TokenizerBox*>(check_udata(L, idx, &kTokenizerMt, "tok", "rl.tokenizer handle"));
  if (!box->tok) throw ArgError(idx, "tok", "rl.tokenizer handle already collected");
  return *box->tok;
}

DecoderBox& check_decoder(lua_State* L, int idx) {
  auto* box = static_cast<DecoderBox*>(check_udata(L, idx, &kDecoderMt, "dec", "rl.tokenizer decoder"));
  if (!box->dec) throw ArgError(idx, "dec", "rl.tokenizer decoder already collected");
  return *box;
}

// Token ids from the array at idx: integers in int32 range.
std::vector<int32_t> decode_ids(lua_State* L, int idx, const char* name) {
  arg::table(L, idx, name);
  const size_t n = lua_objlen(L, idx);
  std::vector<int32_t> ids;
  ids.reserve(n);
  for (size_t i = 1; i <= n; ++i) {
    lua_rawgeti(L, idx, static_cast<int>(i));
    const bool is_number = lua_type(L, -1) == LUA_TNUMBER;
    const double v = is_number ? lua_tonumber(L, -1) : 0;
    const std::string got = arg::type_name(L, -1);
    lua_pop(L, 1);
    if (!is_number || v != static_cast<double>(static_cast<int64_t>(v)) || v < -2147483648.0 || v > 2147483647.0)
      throw ArgError(idx, name,
                     "array of integer token ids expected, got " + (is_number ? std::to_string(v) : got) + " at [" +
                         std::to_string(i) + "]");
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

void push_ids(lua_State* L, const std::vector<int32_t>& ids) {
  lua_createtable(L, static_cast<int>(ids.size()), 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    lua_pushinteger(L, ids[i]);
    lua_rawseti(L, -2, static_cast<int>(i + 1));
  }
}

void push_string(lua_State* L, const std::string& s) { lua_pushlstring(L, s.data(), s.size()); }

// Decodes a method argument: Lua code calls tok:encode(text), so the user counts
// `text` as argument #1 while the C function sees it at index 2.
template <class F>
auto method_arg(F&& decode) -> decltype(decode()) {
  try {
    return decode();
  } catch (const ArgError& e) {
    throw ArgError(e.index > 1 ? e.index - 1 : 0, e.name, e.what());
  }
}

// ---- functions ---------------------------------------------------------------------------
// load(path) -> tok | nil, err
int l_load(lua_State* L) {
  const std::string path(arg::string(L, 1, "path"));
  TokenizerPtr tok;
  std::string err;
  try {
    tok = std::make_shared<const Tokenizer>(Tokenizer::load(path));
  } catch (const std::exception& e) {
    err = e.what();
  }
  if (!tok) return fail(L, err);
  void* mem = lua_newuserdata(L, sizeof(TokenizerBox));
  new (mem) TokenizerBox{{}, std::move(tok)};
  registry_get(L, &kTokenizerMt);
  lua_setmetatable(L, -2);
  return 1;
}

int l_encode(lua_State* L) {
  const Tokenizer& tok = check_tokenizer(L, 1);
  const auto text = method_arg([&] { return arg::string(L, 2, "text"); });
  const bool add_special = method_arg([&] { return arg::opt_boolean(L, 3, "add_special_tokens"); }).value_or(true);
  push_ids(L, tok.encode(text, model::EncodeOptions{add_special}));
  return 1;
}

int l_decode(lua_State* L) {
  const Tokenizer& tok = check_tokenizer(L, 1);
  const std::vector<int32_t> ids = method_arg([&] { return decode_ids(L, 2, "ids"); });
  const bool skip = method_arg([&] { return arg::opt_boolean(L, 3, "skip_special_tokens"); }).value_or(false);
  push_string(L, tok.decode(ids, model::DecodeOptions{skip}));
  return 1;
}

// apply_chat_template(messages_json, kwargs_json) -> text | nil, err
int l_apply_chat_template(lua_State* L) {
  const Tokenizer& tok = check_tokenizer(L, 1);
  const auto messages_text = method_arg([&] { return arg::string(L, 2, "messages_json"); });
  const auto kwargs_text = method_arg([&] { return arg::opt_string(L, 3, "kwargs_json"); });
  auto messages = nlohmann::ordered_json::parse(messages_text, nullptr, false);
  if (messages.is_discarded() || !messages.is_array())
    throw ArgError(1, "messages", "a JSON array of {role=, content=} objects expected");
  auto kwargs = nlohmann::ordered_json::object();
  if (kwargs_text) {
    kwargs = nlohmann::ordered_json::parse(*kwargs_text, nullptr, false);
    if (kwargs.is_discarded() || !kwargs.is_object()) throw ArgError(2, "opts", "a JSON object of template variables expected");
  }
  std::string text, err;
  bool ok = false;
  try {
    text = tok.apply_chat_template(messages, kwargs);
    ok = true;
  } catch (const std::exception& e) {  // template errors (raise_exception, missing template) are runtime failures
    err = e.what();
  }
  if (!ok) return fail(L, err);
  push_string(L, text);
  return 1;
}

int l_token_to_id(lua_State* L) {
  const Tokenizer& tok = check_tokenizer(L, 1);
  const auto id = tok.token_to_id(method_arg([&] { return arg::string(L, 2, "token"); }));
  if (id) lua_pushinteger(L, *id);
  else lua_pushnil(L);
  return 1;
}

int l_id_to_token(lua_State* L) {
  const Tokenizer& tok = check_tokenizer(L, 1);
  const int64_t id = method_arg([&] { return arg::integer(L, 2, "id"); });
  const auto token = id >= INT32_MIN && id <= INT32_MAX ? tok.id_to_token(static_cast<int32_t>(id)) : std::nullopt;
  if (token) push_string(L, *token);
  else lua_pushnil(L);
  return 1;
}

int l_info(lua_State* L) {
  const Tokenizer& tok = check_tokenizer(L, 1);
  lua_createtable(L, 0, 6);
  set_number(L, "vocab_size", tok.vocab_size());
  if (auto bos = tok.bos_token_id()) set_number(L, "bos_token_id", *bos);
  if (auto pad = tok.pad_token_id()) set_number(L, "pad_token_id", *pad);
  push_ids(L, tok.eos_token_ids());
  lua_setfield(L, -2, "eos_token_ids");
  set_string(L, "source", tok.source());
  bool has_template = false;
  try {
    has_template = tok.chat_template() != nullptr;
  } catch (const std::exception&) {
    has_template = true;  // present but unparsable: apply_chat_template reports why
  }
  set_bool(L, "has_chat_template", has_template);
  return 1;
}

// ---- incremental decoding ---------------------------------------------------------------------
int l_decoder(lua_State* L) {
  auto* box = static_cast<TokenizerBox*>(check_udata(L, 1, &kTokenizerMt, "tok", "rl.tokenizer handle"));
  if (!box->tok) throw ArgError(1, "tok", "rl.tokenizer handle already collected");
  const bool skip = method_arg([&] { return arg::opt_boolean(L, 2, "skip_special_tokens"); }).value_or(false);
  void* mem = lua_newuserdata(L, sizeof(DecoderBox));
  auto* dec = new (mem) DecoderBox{};
  registry_get(L, &kDecoderMt);
  lua_setmetatable(L, -2);  // from here __gc destroys it, whatever happens below
  dec->tok = box->tok;
  dec->dec = std::make_unique<model::IncrementalDecoder>(*dec->tok, model::DecodeOptions{skip});
  return 1;
}

int l_decoder_push(lua_State* L) {
  DecoderBox& box = check_decoder(L, 1);
  const int64_t id = method_arg([&] { return arg::integer(L, 2, "id"); });
  if (id < INT32_MIN || id > INT32_MAX) throw ArgError(1, "id", "a token id (32-bit integer) expected");
  push_string(L, box.dec->push(static_cast<int32_t>(id)));
  return 1;
}

int l_decoder_finish(lua_State* L) {
  push_string(L, check_decoder(L, 1).dec->finish());
  return 1;
}

}  // namespace

void open_tokenizer(lua_State* L, int t) {
  static const Reg tokenizer_methods[] = {
      {"encode", entry<l_encode>},           {"decode", entry<l_decode>},
      {"apply_chat_template", entry<l_apply_chat_template>},
      {"token_to_id", entry<l_token_to_id>}, {"id_to_token", entry<l_id_to_token>},
      {"info", entry<l_info>},               {"decoder", entry<l_decoder>},
  };
  make_metatable(L, &kTokenizerMt, "rl.tokenizer.Tokenizer:", tokenizer_methods, std::size(tokenizer_methods),
                 entry<destroy_udata<TokenizerBox>>);
  static const Reg decoder_methods[] = {
      {"push", entry<l_decoder_push>},
      {"finish", entry<l_decoder_finish>},
  };
  make_metatable(L, &kDecoderMt, "rl.tokenizer.Decoder:", decoder_methods, std::size(decoder_methods),
                 entry<destroy_udata<DecoderBox>>);
  static const Reg regs[] = {
      {"load", entry<l_load>},
  };
  register_functions(L, t, "rl.tokenizer.", regs);
}

}  // namespace rl::lua
