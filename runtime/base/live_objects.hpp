// A process-wide count of live C++ objects that cross the Lua boundary
// (userdata payloads, in-flight operations, callback guards). Tests assert it
// returns to zero after error paths: proof that no C++ object leaked or was
// skipped by a non-local exit.
#pragma once

#include <atomic>
#include <cstdint>

namespace rl {

std::atomic<int64_t>& live_object_counter();
inline int64_t live_objects() { return live_object_counter().load(); }

// Inherit (or hold as a member) to be counted.
struct LiveObject {
  LiveObject() noexcept { live_object_counter().fetch_add(1); }
  LiveObject(const LiveObject&) noexcept { live_object_counter().fetch_add(1); }
  LiveObject& operator=(const LiveObject&) noexcept { return *this; }
  ~LiveObject() { live_object_counter().fetch_sub(1); }
};

}  // namespace rl
