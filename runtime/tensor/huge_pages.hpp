// Host memory for large buffers written in full soon after they are made (a weight
// update's spare weights and receive buffers): one anonymous mapping, 2 MiB aligned,
// offered transparent huge pages (madvise), and kept when released for the next arena
// of the same size (every update asks for the same sizes). A fresh page costs a fault
// and a zeroing on first touch: on the 2-vCPU build machine (THP "madvise", Debian's
// default) writing 168 MB of fresh malloc'd memory took 0.08-0.11 s, ten times writing
// it again; a broadcast of the 42M model's weights to two engines spent a fifth of its
// CPU in the kernel's page zeroing. Kept: at most four mappings and a quarter of the
// machine's memory (drop_kept() gives them back).
#pragma once

#include <cstdint>
#include <memory>

#include <c10/core/Storage.h>

namespace rl::tensor {

class HugePageArena {
 public:
  // `nbytes` of CPU memory (contents zero; the pages come on first touch). Throws
  // rl::Error when the mapping fails. Huge pages are best effort: a kernel without
  // them, or with THP "never", gives ordinary pages.
  static std::shared_ptr<HugePageArena> make(int64_t nbytes);
  ~HugePageArena();
  HugePageArena(const HugePageArena&) = delete;
  HugePageArena& operator=(const HugePageArena&) = delete;

  int64_t size() const { return size_; }
  // Unmaps the kept mappings (an engine releasing its memory). Returns the bytes freed.
  static int64_t drop_kept();
  // A storage of `nbytes` at `offset` (within size()): it keeps the arena alive, so
  // the mapping goes when the last such storage does.
  c10::Storage storage(int64_t offset, int64_t nbytes) const;

 private:
  HugePageArena(void* base, int64_t size, int64_t mapped) : base_(base), size_(size), mapped_(mapped) {}
  void* base_;
  int64_t size_, mapped_;
  std::weak_ptr<const HugePageArena> self_;
};

// Below this many bytes a buffer is not worth a mapping of its own.
constexpr int64_t kHugePageBytes = int64_t{2} << 20;

}  // namespace rl::tensor
