#include "base/errors.hpp"

#include "base/live_objects.hpp"

#include <cerrno>
#include <cstring>

namespace rl {

void throw_errno(const std::string& what) { throw Error(what + ": " + std::strerror(errno)); }

std::atomic<int64_t>& live_object_counter() {
  static std::atomic<int64_t> counter{0};
  return counter;
}

}  // namespace rl
