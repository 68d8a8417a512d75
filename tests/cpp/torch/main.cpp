// LibTorch headers come first (PCH); Catch2's prefixed macros avoid c10's CHECK.
#define CATCH_CONFIG_PREFIX_ALL
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
