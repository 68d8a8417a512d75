// Skips for the Catch2 executables (Catch2 v2 has no SKIP): a test that cannot run
// because a peer or tool is missing calls rl::test::skip(what, hint) and returns.
// Outside CI it is recorded, and tests/cpp/main.cpp exits 77 after a run in which
// nothing failed, which ctest shows as Skipped (SKIP_RETURN_CODE); under CI=true
// skip() throws, so the test fails naming what is missing and how to install it.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace rl::test {

constexpr int kSkipExit = 77;

inline bool ci() {
  const char* v = std::getenv("CI");
  const std::string s = v ? v : "";
  return s == "1" || s == "true" || s == "TRUE" || s == "True" || s == "yes";
}

inline std::vector<std::string>& skipped() {
  static std::vector<std::string> list;
  return list;
}

// Records a skip (prints it at once too); under CI=true throws instead.
inline void skip(const std::string& what, const std::string& hint) {
  const std::string msg = what + ": " + hint;
  if (ci()) throw std::runtime_error("CI=true and a test peer is missing: " + msg);
  std::fprintf(stderr, "SKIPPED %s\n", msg.c_str());
  skipped().push_back(msg);
}

}  // namespace rl::test
