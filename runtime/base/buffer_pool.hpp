// Large byte buffers kept for reuse. Memory a process fills again at every weight sync
// (the buckets an engine receives over HTTP, the ones a trainer encodes to send) stays
// mapped between syncs instead of being faulted in fresh each time: the kernel zeroes a
// fresh page on first touch, which ran at 1.1-1.4 GB/s on the 2-core VM in
// bench/README.md. Thread-safe; buffers under kMinBytes are not kept; the pool holds at
// most its bound (a buffer that does not fit is freed).
#pragma once
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace rl {

class BufferPool {
 public:
  static constexpr size_t kMinBytes = size_t{1} << 20;

  explicit BufferPool(size_t max_bytes) : max_bytes_(max_bytes) {}
  // An empty string whose capacity is at least n: the smallest kept buffer big enough,
  // else a new one.
  std::string take(size_t n);
  // Keeps `s`'s capacity for a later take().
  void give(std::string&& s);
  size_t held_bytes() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::string> kept_;
  size_t held_ = 0;
  size_t max_bytes_;
};

// The process's pool: up to 512 MiB of buffers of 1 MiB or more.
BufferPool& large_buffers();

// `s` shared read-only; its buffer goes back to large_buffers() when the last owner
// lets go.
std::shared_ptr<const std::string> share_pooled(std::string&& s);

}  // namespace rl
