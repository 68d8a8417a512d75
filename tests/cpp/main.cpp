// Catch2's runner for rlhost_cpp_tests and rlhost_torch_tests (tests/CMakeLists.txt
// builds it once). The torch tests use the CATCH_-prefixed macros (c10 has CHECK);
// the prefix changes only macro names, so one runner serves both.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
