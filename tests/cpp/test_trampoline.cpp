// The Lua ⇄ C++ boundary: every error path through entry<> ends as a Lua error
// with a useful message, and leaves no C++ object alive.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "base/live_objects.hpp"
#include "bindings/trampoline.hpp"

using namespace rl::lua;

namespace {

struct Guarded : rl::LiveObject {
  std::string payload = std::string(256, 'x');  // something with a destructor that allocates
  std::vector<int> more = std::vector<int>(64, 1);
};

int l_throw_std(lua_State* L) {
  Guarded g;
  std::string msg(arg::string(L, 1, "message"));
  throw std::runtime_error(msg);
}

int l_throw_int(lua_State*) {
  Guarded g;
  throw 42;
}

int l_add(lua_State* L) {
  const double a = arg::number(L, 1, "a");
  const int64_t b = arg::integer(L, 2, "b");
  lua_pushnumber(L, a + static_cast<double>(b));
  return 1;
}

int l_opts(lua_State* L) {
  arg::table(L, 1, "opts");
  auto url = arg::field_string(L, 1, "url", "opts");
  auto timeout = arg::field_number(L, 1, "timeout", "opts");
  lua_pushstring(L, std::string(url.value_or("")).c_str());
  lua_pushnumber(L, timeout.value_or(-1));
  return 2;
}

// Calls back into Lua with C++ objects alive; a Lua error there must unwind them.
int l_call_back(lua_State* L) {
  arg::function(L, 1, "fn");
  Guarded g;
  std::vector<Guarded> many(10);
  lua_pushvalue(L, 1);
  call_or_throw(L, 0, 1);
  return 1;
}

// Bad discipline on purpose: raises a Lua error straight from C++. LuaJIT unwinds
// with a foreign exception; the trampoline must let it through (not swallow it)
// and C++ destructors must still run.
int l_raw_lua_error(lua_State* L) {
  Guarded g;
  return luaL_error(L, "raw lua error");
}

int l_fail(lua_State* L) { return fail(L, "no such thing"); }

const Reg kTestFns[] = {
    {"throw_std", entry<l_throw_std>},     {"throw_int", entry<l_throw_int>},
    {"add", entry<l_add>},                 {"opts", entry<l_opts>},
    {"call_back", entry<l_call_back>},     {"raw_lua_error", entry<l_raw_lua_error>},
    {"fail", entry<l_fail>},
};

struct State {
  lua_State* L;
  State() : L(luaL_newstate()) {
    luaL_openlibs(L);
    lua_newtable(L);
    register_functions(L, -1, "test.", kTestFns);
    lua_setglobal(L, "test");
  }
  ~State() { lua_close(L); }
  // Runs code in protected mode; returns "" on success or the error message.
  std::string run(const std::string& code) {
    if (luaL_loadstring(L, code.c_str()) != 0) {
      std::string e = lua_tostring(L, -1);
      lua_pop(L, 1);
      return "syntax: " + e;
    }
    std::string err;
    if (!call_protected(L, 0, 0, &err)) return err;
    return "";
  }
};

}  // namespace

TEST_CASE("a C++ exception surfaces in Lua with its message and the function name") {
  State s;
  const auto before = rl::live_objects();
  auto err = s.run("test.throw_std('disk on fire')");
  CHECK(err.find("test.throw_std: disk on fire") != std::string::npos);
  CHECK(rl::live_objects() == before);
}

TEST_CASE("pcall sees the error; the state stays usable") {
  State s;
  auto err = s.run(R"(
    local ok, e = pcall(test.throw_std, 'x1')
    assert(not ok and e:find('test.throw_std: x1', 1, true), e)
    assert(test.add(1, 2) == 3)
  )");
  CHECK(err == "");
}

TEST_CASE("non-std exceptions are reported, not crashes") {
  State s;
  const auto before = rl::live_objects();
  auto err = s.run("test.throw_int()");
  CHECK(err.find("test.throw_int: unknown C++ exception") != std::string::npos);
  CHECK(rl::live_objects() == before);
}

TEST_CASE("bad arguments name the function, the position and the name") {
  State s;
  CHECK(s.run("test.add('x', 2)").find("test.add: bad argument #1 'a' (number expected, got string)") !=
        std::string::npos);
  CHECK(s.run("test.add(1, 2.5)").find("test.add: bad argument #2 'b' (integer expected") != std::string::npos);
  CHECK(s.run("test.add(1)").find("bad argument #2 'b' (number expected, got no value)") != std::string::npos);
  CHECK(s.run("test.opts({url = 5})").find("test.opts: bad argument 'opts.url' (string expected, got number)") !=
        std::string::npos);
  CHECK(s.run("local u, t = test.opts({url='http://x', timeout=2}); assert(u == 'http://x' and t == 2)") == "");
}

TEST_CASE("a Lua error inside a C++ -> Lua callback leaves no C++ object alive") {
  State s;
  const auto before = rl::live_objects();
  auto err = s.run("test.call_back(function() error('inner failure') end)");
  CHECK(err.find("test.call_back: ") != std::string::npos);
  CHECK(err.find("inner failure") != std::string::npos);
  CHECK(rl::live_objects() == before);
  // and a successful callback returns its value
  CHECK(s.run("assert(test.call_back(function() return 7 end) == 7)") == "");
  CHECK(rl::live_objects() == before);
}

TEST_CASE("a raw Lua error from C++ passes through the trampoline and still unwinds C++") {
  State s;
  const auto before = rl::live_objects();
  auto err = s.run("test.raw_lua_error()");
  CHECK(err.find("raw lua error") != std::string::npos);
  CHECK(err.find("unknown C++ exception") == std::string::npos);
  CHECK(rl::live_objects() == before);
}

TEST_CASE("errors inside a coroutine fail that coroutine, not the state") {
  State s;
  const auto before = rl::live_objects();
  auto err = s.run(R"(
    local co = coroutine.create(function()
      coroutine.yield(1)
      test.throw_std('in coroutine')
    end)
    assert(select(2, coroutine.resume(co)) == 1)
    local ok, e = coroutine.resume(co)
    assert(not ok and e:find('in coroutine', 1, true), e)
    assert(coroutine.status(co) == 'dead')
    local co2 = coroutine.create(function() return test.call_back(function() error('deep') end) end)
    local ok2, e2 = coroutine.resume(co2)
    assert(not ok2 and e2:find('deep', 1, true), e2)
    assert(test.add(2, 3) == 5)
  )");
  CHECK(err == "");
  CHECK(rl::live_objects() == before);
}

TEST_CASE("runtime failures return nil, err") {
  State s;
  CHECK(s.run("local v, e = test.fail(); assert(v == nil and e == 'no such thing')") == "");
}

TEST_CASE("call_protected adds a traceback") {
  State s;
  auto err = s.run("local function f() error('with trace') end f()");
  CHECK(err.find("with trace") != std::string::npos);
  CHECK(err.find("stack traceback") != std::string::npos);
}
