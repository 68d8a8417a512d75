#include "base/admin_token.hpp"

#include <sys/random.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "base/errors.hpp"

namespace rl {
namespace {

struct TokenState {
  std::string token;
  bool generated = false;
};

const TokenState& state() {
  static const TokenState s = [] {
    TokenState t;
    const char* env = std::getenv(kAdminTokenEnv);
    if (env && std::string(env).size() >= 16) {
      t.token = env;
    } else {
      t.token = random_hex(16);
      t.generated = true;
    }
    return t;
  }();
  return s;
}

}  // namespace

std::string random_hex(size_t n) {
  std::string bytes(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::getrandom(bytes.data() + got, n - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw_errno("getrandom");
    }
    got += static_cast<size_t>(r);
  }
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (unsigned char b : bytes) {
    out += hex[b >> 4];
    out += hex[b & 15];
  }
  return out;
}

const std::string& admin_token() { return state().token; }
bool admin_token_generated() { return state().generated; }

void export_admin_token() {
  const char* env = std::getenv(kAdminTokenEnv);
  if (env && *env && admin_token_generated())
    std::fprintf(stderr, "rlhost: $%s is shorter than 16 characters: ignored, this run uses a random token\n",
                 kAdminTokenEnv);
  ::setenv(kAdminTokenEnv, admin_token().c_str(), 1);
}

bool same_secret(const std::string& given, const std::string& expected) {
  if (expected.empty() || given.size() != expected.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < given.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ expected[i]);
  return diff == 0;
}

bool bearer_matches(const std::string& authorization, const std::string& token_a, const std::string& token_b) {
  static const std::string prefix = "Bearer ";
  if (authorization.size() <= prefix.size() || authorization.compare(0, prefix.size(), prefix) != 0) return false;
  const std::string given = authorization.substr(prefix.size());
  // Both comparisons always run: which token matched must not show in timing.
  const bool a = same_secret(given, token_a);
  const bool b = same_secret(given, token_b);
  return a || b;
}

}  // namespace rl
