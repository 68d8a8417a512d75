#include "nn/weights_digest.hpp"

#include <ATen/Parallel.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>
#include <algorithm>

namespace rl::nn {
namespace {

constexpr uint64_t kKeyA = 0x9e3779b97f4a7c15ull, kKeyB = 0xc2b2ae3d27d4eb4full;

__attribute__((always_inline)) inline uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t fnv(const std::string& s, uint64_t h) {
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

struct Sum {
  uint64_t a = 0, b = 0;
};

// Physical rows [r0, r1) of `cols` unit-stride elements (row r at p + r * ld): element
// (r, c) has the logical index r * rs + c * cs.
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
Sum sum_rows(const float* p, int64_t ld, int64_t r0, int64_t r1, int64_t cols, int64_t rs, int64_t cs,
             uint64_t salt_a, uint64_t salt_b) {
  uint64_t a = 0, b = 0;
  for (int64_t r = r0; r < r1; ++r) {
    const uint32_t* v = reinterpret_cast<const uint32_t*>(p + r * ld);
    for (int64_t c = 0; c < cols; ++c) {
      const uint64_t x = (static_cast<uint64_t>(r * rs + c * cs) << 32) | v[c];
      a += mix(x ^ salt_a);
      b += mix(x ^ salt_b);
    }
  }
  return {a, b};
}

std::string hex(uint64_t a, uint64_t b) {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return buf;
}

}  // namespace

std::string add_digests(const std::string& x, const std::string& y) {
  const auto halves = [](const std::string& d) {
    if (d.size() != 32) throw std::invalid_argument("add_digests: '" + d + "' is not a 32-hex-digit digest");
    return std::pair<uint64_t, uint64_t>{std::stoull(d.substr(0, 16), nullptr, 16), std::stoull(d.substr(16), nullptr, 16)};
  };
  const auto [xa, xb] = halves(x);
  const auto [ya, yb] = halves(y);
  return hex(xa + ya, xb + yb);
}

std::string weights_digest(const std::vector<std::pair<std::string, torch::Tensor>>& params) {
  uint64_t a = 0, b = 0;
  for (const auto& [name, t] : params) {
    if (!t.defined()) continue;
    if (!t.device().is_cpu() || t.scalar_type() != torch::kFloat32 || t.dim() > 2)
      throw std::invalid_argument("weights_digest: " + name + " is not a float32 CPU tensor of at most 2 dimensions");
    uint64_t h = fnv(name, 0xcbf29ce484222325ull);
    for (int64_t s : t.sizes()) h = (h ^ static_cast<uint64_t>(s)) * 0x100000001b3ull;
    const uint64_t salt_a = mix(h ^ kKeyA), salt_b = mix(h ^ kKeyB);
    a += salt_a;
    b += salt_b;
    if (t.numel() == 0) continue;
    // As rows of a unit-stride dimension: logical [R, C] with (r, c) at r * sr + c * sc.
    const int64_t R = t.dim() == 2 ? t.size(0) : 1, C = t.dim() == 2 ? t.size(1) : t.numel();
    const int64_t sr = t.dim() == 2 ? t.stride(0) : 0, sc = t.stride(t.dim() - 1);
    torch::Tensor keep = t;
    const float* base = nullptr;
    int64_t rows, cols, ld, rs, cs;  // physical rows of `cols` unit-stride elements
    if (sc == 1 || C == 1) {
      rows = R, cols = C, ld = R > 1 ? sr : C, rs = C, cs = 1;
    } else if (sr == 1 || R == 1) {
      rows = C, cols = R, ld = C > 1 ? sc : R, rs = 1, cs = C;  // walk columns: logical (c, r)
    } else {
      keep = t.contiguous();
      rows = R, cols = C, ld = C, rs = C, cs = 1;
    }
    base = keep.data_ptr<float>();
    const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(1, cols));
    std::vector<Sum> chunks(static_cast<size_t>((rows + grain - 1) / grain));
    at::parallel_for(0, static_cast<int64_t>(chunks.size()), 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c)
        chunks[static_cast<size_t>(c)] =
            sum_rows(base, ld, c * grain, std::min(rows, (c + 1) * grain), cols, rs, cs, salt_a, salt_b);
    });
    for (const auto& s : chunks) {
      a += s.a;
      b += s.b;
    }
  }
  return hex(a, b);
}

std::string logprob_digest(const std::string& weights, double temperature) {
  uint64_t t;
  const double v = temperature > 0 ? temperature : 1.0;
  std::memcpy(&t, &v, sizeof t);
  const uint64_t h = fnv(weights, 0xcbf29ce484222325ull);
  return hex(mix(h ^ t ^ kKeyA), mix(h ^ (t * 0x100000001b3ull) ^ kKeyB));
}

}  // namespace rl::nn
