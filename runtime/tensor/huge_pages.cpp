#include "tensor/huge_pages.hpp"

#include <sys/mman.h>

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>

#include "base/errors.hpp"

namespace rl::tensor {

namespace {

// Mappings whose arena was released, kept (warm: their pages are in place, nothing to
// fault or zero) for the next arena of the same size: a weight update asks for the same
// sizes every time (the spare weights, the GEMM panels, the receive buffers). At most
// four, and at most a quarter of the machine's memory.
struct Pool {
  std::mutex mu;
  std::deque<std::pair<void*, int64_t>> kept;  // base, mapped bytes; newest last
  int64_t bytes = 0;
};
Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: arenas may go during exit
  return *p;
}
int64_t pool_limit() {
  static const int64_t limit = [] {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page / 4 : int64_t{0};
  }();
  return limit;
}

void* map_aligned(int64_t mapped) {
  // One huge page more, so that an aligned start lies within; the rest is unmapped.
  const size_t span = static_cast<size_t>(mapped + kHugePageBytes);
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED)
    throw Error("weight buffers: mmap of " + std::to_string(span >> 20) + " MiB failed: " + std::strerror(errno),
                "free memory, or give the engine a smaller model");
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = start + span, used_end = aligned + static_cast<uintptr_t>(mapped);
  if (end > used_end) munmap(reinterpret_cast<void*>(used_end), end - used_end);
#ifdef MADV_HUGEPAGE
  madvise(reinterpret_cast<void*>(aligned), static_cast<size_t>(mapped), MADV_HUGEPAGE);  // best effort
#endif
  return reinterpret_cast<void*>(aligned);
}

}  // namespace

std::shared_ptr<HugePageArena> HugePageArena::make(int64_t nbytes) {
  if (nbytes <= 0) throw Error("HugePageArena: size must be > 0 (got " + std::to_string(nbytes) + ")");
  const int64_t mapped = (nbytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  void* base = nullptr;
  {
    auto& p = pool();
    std::lock_guard<std::mutex> lock(p.mu);
    for (auto it = p.kept.begin(); it != p.kept.end(); ++it)
      if (it->second == mapped) {
        base = it->first;
        p.bytes -= mapped;
        p.kept.erase(it);
        break;
      }
  }
  if (!base) base = map_aligned(mapped);
  std::shared_ptr<HugePageArena> a(new HugePageArena(base, nbytes, mapped));
  a->self_ = a;
  return a;
}

int64_t HugePageArena::drop_kept() {
  auto& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  const int64_t freed = p.bytes;
  for (const auto& [base, mapped] : p.kept) munmap(base, static_cast<size_t>(mapped));
  p.kept.clear();
  p.bytes = 0;
  return freed;
}

HugePageArena::~HugePageArena() {
  auto& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  if (mapped_ <= pool_limit()) {
    p.kept.emplace_back(base_, mapped_);
    p.bytes += mapped_;
    while (p.kept.size() > 4 || p.bytes > pool_limit()) {
      munmap(p.kept.front().first, static_cast<size_t>(p.kept.front().second));
      p.bytes -= p.kept.front().second;
      p.kept.pop_front();
    }
    return;
  }
  munmap(base_, static_cast<size_t>(mapped_));
}

c10::Storage HugePageArena::storage(int64_t offset, int64_t nbytes) const {
  if (offset < 0 || nbytes < 0 || offset + nbytes > size_)
    throw std::out_of_range("HugePageArena::storage: [" + std::to_string(offset) + ", +" + std::to_string(nbytes) +
                            ") outside " + std::to_string(size_) + " bytes");
  auto* keep = new std::shared_ptr<const HugePageArena>(self_.lock());
  void* p = static_cast<char*>(base_) + offset;
  c10::DataPtr ptr(p, keep, [](void* ctx) { delete static_cast<std::shared_ptr<const HugePageArena>*>(ctx); },
                   c10::Device(c10::kCPU));
  return c10::Storage(c10::Storage::use_byte_size_t(), static_cast<size_t>(nbytes), std::move(ptr), nullptr, false);
}

}  // namespace rl::tensor
