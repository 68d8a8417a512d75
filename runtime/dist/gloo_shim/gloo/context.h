// Declarations-only stand-in (see README.md).
#pragma once
#include <chrono>

namespace gloo {
class Context {
 public:
  void setTimeout(std::chrono::milliseconds timeout);  // named by ProcessGroupGloo::setTimeout
};
}  // namespace gloo
