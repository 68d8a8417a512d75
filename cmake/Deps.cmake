# Third-party dependencies other than LibTorch. Everything comes from Debian
# packages (scripts/bootstrap.sh installs them); each failure names the package.
find_package(PkgConfig REQUIRED)

function(rlhost_require_pkg target module debian_pkg)
  pkg_check_modules(${target} IMPORTED_TARGET ${module})
  if(NOT ${target}_FOUND)
    message(FATAL_ERROR "rlhost: pkg-config module '${module}' not found. "
                        "Install it with: apt-get install ${debian_pkg} (or run scripts/bootstrap.sh)")
  endif()
endfunction()

# LuaJIT through pkg-config: CMake's FindLua would pick Lua 5.4.
rlhost_require_pkg(LUAJIT luajit libluajit-5.1-dev)
rlhost_require_pkg(CURL libcurl libcurl4-openssl-dev)
# Debian's cpp-httplib is a compiled library: its CPPHTTPLIB_* defines must match.
rlhost_require_pkg(HTTPLIB cpp-httplib libcpp-httplib-dev)

find_package(spdlog REQUIRED)
find_package(nlohmann_json 3.9 REQUIRED)
find_package(Threads REQUIRED)

# Line editing for the REPL: GNU readline.
find_path(READLINE_INCLUDE_DIR readline/readline.h)
find_library(READLINE_LIBRARY readline)
if(NOT READLINE_INCLUDE_DIR OR NOT READLINE_LIBRARY)
  message(FATAL_ERROR "rlhost: GNU readline not found. Install it with: apt-get install libreadline-dev")
endif()
add_library(rlhost_readline INTERFACE)
target_include_directories(rlhost_readline INTERFACE ${READLINE_INCLUDE_DIR})
target_link_libraries(rlhost_readline INTERFACE ${READLINE_LIBRARY})

if(RLHOST_TESTS)
  find_package(Catch2 2 REQUIRED)  # Debian ships Catch2 v2: <catch2/catch.hpp>
endif()
