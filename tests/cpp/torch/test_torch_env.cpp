// LibTorch errors cross the boundary as clean messages (no C++ backtrace).
#include <torch/torch.h>

#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

#include <ATen/Version.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "base/live_objects.hpp"
#include "bindings/trampoline.hpp"
#include "tensor/torch_env.hpp"

using namespace rl::lua;

namespace {

int l_bad_view(lua_State* L) {
  auto t = torch::zeros({2, 3});
  auto v = t.view({static_cast<int64_t>(arg::integer(L, 1, "n"))});  // c10::Error unless n == 6
  lua_pushnumber(L, static_cast<double>(v.numel()));
  return 1;
}

}  // namespace

CATCH_TEST_CASE("torch_info reports the LibTorch we linked") {
  auto info = rl::tensor::torch_info();
  CATCH_CHECK(info.version.rfind("2.", 0) == 0);
  CATCH_CHECK(info.num_threads >= 1);
}

CATCH_TEST_CASE("ATen runs the CPU capability this run of the specs was registered for") {
  // ctest runs these specs once per capability the host offers (tests/CMakeLists.txt);
  // a capability ATen silently ignored would make those runs test nothing new.
  const char* want = std::getenv("RLHOST_TEST_ATEN_CAPABILITY");
  if (!want || !*want) return;
  std::string got = at::get_cpu_capability();
  std::transform(got.begin(), got.end(), got.begin(), [](unsigned char c) { return std::tolower(c); });
  CATCH_CHECK(got == want);
}

CATCH_TEST_CASE("describe_c10_error drops the C++ backtrace") {
  std::string msg;
  try {
    rl::tensor::set_num_threads(0);
    CATCH_FAIL("expected a c10::Error");
  } catch (...) {
    CATCH_REQUIRE(rl::tensor::describe_c10_error(std::current_exception(), msg));
  }
  CATCH_CHECK(msg.find("Expected positive number of threads") != std::string::npos);
  CATCH_CHECK(msg.find("Exception raised from") == std::string::npos);
}

CATCH_TEST_CASE("a c10::Error surfaces in Lua through the trampoline") {
  add_exception_translator(rl::tensor::describe_c10_error);
  lua_State* L = luaL_newstate();
  luaL_openlibs(L);
  const Reg regs[] = {{"bad_view", entry<l_bad_view>}};
  lua_newtable(L);
  register_functions(L, -1, "rl.torch.", regs);
  lua_setglobal(L, "t");
  const auto before = rl::live_objects();
  luaL_loadstring(L, "return t.bad_view(6), select(2, pcall(t.bad_view, 5))");
  std::string err;
  CATCH_REQUIRE(call_protected(L, 0, 2, &err));
  CATCH_CHECK(lua_tonumber(L, -2) == 6);
  std::string msg = lua_tostring(L, -1);
  CATCH_CHECK(msg.rfind("rl.torch.bad_view: ", 0) == 0);
  CATCH_CHECK(msg.find("shape '[5]' is invalid for input of size 6") != std::string::npos);
  CATCH_CHECK(msg.find("Exception raised from") == std::string::npos);
  CATCH_CHECK(rl::live_objects() == before);
  lua_close(L);
}
