// The run's admin token: what the control endpoints of rlhost's servers (engine
// weights/memory/profile/abort/flush, router worker changes) require in
// `Authorization: Bearer <token>`, even on loopback, so that other users of the
// machine cannot drive them.
//
// One token per run: the first rlhost process generates it (or takes
// $RLHOST_ADMIN_TOKEN) and exports it into its own environment before any
// thread starts (export_admin_token, from main), so every child it starts
// (process-mode engines and routers, --nproc ranks) inherits it privately:
// /proc/<pid>/environ is readable by the owner only, unlike argv.
#pragma once

#include <string>

namespace rl {

inline constexpr const char* kAdminTokenEnv = "RLHOST_ADMIN_TOKEN";

// The token: $RLHOST_ADMIN_TOKEN when set (at least 16 characters), else 32
// random hex digits generated once per process. Thread-safe.
const std::string& admin_token();
// True when this process generated the token (it did not inherit one).
bool admin_token_generated();
// Makes sure $RLHOST_ADMIN_TOKEN holds admin_token() (setenv). Call while the
// process has one thread (main); later children inherit it.
void export_admin_token();

// `n` random bytes as 2n hex digits (getrandom). Throws rl::Error.
std::string random_hex(size_t n);
// Constant-time equality of two secrets; false when `expected` is empty.
bool same_secret(const std::string& given, const std::string& expected);
// True when an Authorization header value is "Bearer <one of the tokens>"
// (empty tokens never match).
bool bearer_matches(const std::string& authorization, const std::string& token_a, const std::string& token_b = {});

}  // namespace rl
