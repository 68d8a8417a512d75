// rl._core.admin: the run's admin token (runtime/base/admin_token.hpp), which the
// control endpoints of rlhost's engines and routers require.
//
//   _core.admin.token() -> string       sent by rl.engine, rl.router, the trainer's sync
//   _core.admin.generated() -> bool     true when this process made it (not inherited)
//   _core.admin.save() -> path | nil, err
//       writes it to <runtime dir>/<pid>.admin-token (mode 0600 in the 0700
//       per-user directory, docs/attach.md) for tools of the same user; removed
//       at exit. Idempotent.
//   _core.admin.box_keypair() -> public_hex, private_hex     (net/sealed_box.hpp)
//   _core.admin.box_seal(public_hex, message) -> box_hex
//   _core.admin.box_open(public_hex, private_hex, box_hex) -> message | nil, err
//       the run's token to another host's rank over the c10d store (lua/rl/recipe/hosts.lua)
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string_view>
#include <string>

#include "base/admin_token.hpp"
#include "bindings/core_module.hpp"
#include "bindings/trampoline.hpp"
#include "host/control_registry.hpp"
#include "net/sealed_box.hpp"

namespace rl::lua {
namespace {

std::string g_saved_path;

void remove_saved() {
  if (!g_saved_path.empty()) ::unlink(g_saved_path.c_str());
}

int l_token(lua_State* L) {
  const std::string& t = admin_token();
  lua_pushlstring(L, t.data(), t.size());
  return 1;
}

int l_generated(lua_State* L) {
  lua_pushboolean(L, admin_token_generated());
  return 1;
}

int l_save(lua_State* L) {
  if (g_saved_path.empty()) {
    std::string path;
    try {
      path = control::ensure_runtime_dir() + "/" + std::to_string(::getpid()) + ".admin-token";
      control::write_private_file(path, admin_token() + "\n");
    } catch (const std::exception& e) {
      std::string msg = std::string("cannot save the admin token: ") + e.what();
      return fail(L, msg);
    }
    g_saved_path = path;
    std::atexit(remove_saved);
  }
  lua_pushlstring(L, g_saved_path.data(), g_saved_path.size());
  return 1;
}

std::string to_hex(const std::string& raw) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(raw.size() * 2);
  for (unsigned char c : raw) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

std::optional<std::string> from_hex(std::string_view hex) {
  if (hex.size() % 2) return std::nullopt;
  auto val = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = val(hex[2 * i]), lo = val(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<char>(hi * 16 + lo);
  }
  return out;
}

std::string hex_arg(lua_State* L, int idx, const char* name) {
  auto raw = from_hex(arg::string(L, idx, name));
  if (!raw) throw ArgError(idx, name, "hex digits expected");
  return *raw;
}

int l_box_keypair(lua_State* L) {
  const auto k = net::box_keypair();
  const auto pub = to_hex(k.public_key), priv = to_hex(k.private_key);
  lua_pushlstring(L, pub.data(), pub.size());
  lua_pushlstring(L, priv.data(), priv.size());
  return 2;
}

int l_box_seal(lua_State* L) {
  const std::string pub = hex_arg(L, 1, "public_key");
  if (pub.size() != 32) throw ArgError(1, "public_key", "64 hex digits expected");
  const auto box = to_hex(net::box_seal(pub, std::string(arg::string(L, 2, "message"))));
  lua_pushlstring(L, box.data(), box.size());
  return 1;
}

int l_box_open(lua_State* L) {
  net::BoxKeys k{hex_arg(L, 1, "public_key"), hex_arg(L, 2, "private_key")};
  const auto box = from_hex(arg::string(L, 3, "box"));
  std::optional<std::string> msg = box ? net::box_open(k, *box) : std::nullopt;
  if (!msg) return fail(L, "the box does not open with this key (sealed to another key, or altered)");
  lua_pushlstring(L, msg->data(), msg->size());
  return 1;
}

}  // namespace

void open_admin(lua_State* L, int t) {
  static const Reg regs[] = {
      {"token", entry<l_token>},           {"generated", entry<l_generated>}, {"save", entry<l_save>},
      {"box_keypair", entry<l_box_keypair>}, {"box_seal", entry<l_box_seal>},   {"box_open", entry<l_box_open>}};
  register_functions(L, t, "rl.admin.", regs);
}

}  // namespace rl::lua
