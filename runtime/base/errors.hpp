// Error types of the runtime. Messages say what, where, and a hint.
#pragma once

#include <stdexcept>
#include <string>

namespace rl {

// A failure with an optional hint, e.g.
//   Error("tokenizer.json: merges[12] is not a pair", "expected 'a b' or [\"a\",\"b\"]")
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, const std::string& hint = {})
      : std::runtime_error(hint.empty() ? what : what + " (hint: " + hint + ")") {}
};

// errno-based failure: "<what>: <strerror(errno)>".
[[noreturn]] void throw_errno(const std::string& what);

}  // namespace rl
