#include "base/buffer_pool.hpp"

namespace rl {

std::string BufferPool::take(size_t n) {
  {
    std::lock_guard lk(mu_);
    size_t best = kept_.size();
    for (size_t i = 0; i < kept_.size(); ++i)
      if (kept_[i].capacity() >= n && (best == kept_.size() || kept_[i].capacity() < kept_[best].capacity())) best = i;
    if (best < kept_.size()) {
      std::string s = std::move(kept_[best]);
      kept_.erase(kept_.begin() + static_cast<std::ptrdiff_t>(best));
      held_ -= s.capacity();
      return s;
    }
  }
  std::string s;
  s.reserve(n);
  return s;
}

void BufferPool::give(std::string&& s) {
  if (s.capacity() < kMinBytes) return;
  s.clear();
  std::lock_guard lk(mu_);
  if (held_ + s.capacity() > max_bytes_) return;   // over the bound: the caller's string frees it
  held_ += s.capacity();
  kept_.push_back(std::move(s));
}

size_t BufferPool::held_bytes() const {
  std::lock_guard lk(mu_);
  return held_;
}

BufferPool& large_buffers() {
  static BufferPool* pool = new BufferPool(size_t{512} << 20);   // never destroyed: a buffer may come back at exit
  return *pool;
}

std::shared_ptr<const std::string> share_pooled(std::string&& s) {
  return std::shared_ptr<std::string>(new std::string(std::move(s)), [](std::string* p) {
    large_buffers().give(std::move(*p));
    delete p;
  });
}

}  // namespace rl
