// Decode attention over the paged KV cache (nn/paged_attention.hpp) alone: S
// sequences of CTX tokens each, H heads of D, their 16-slot blocks interleaved as
// continuous batching hands them out, one cache per layer (LAYERS of them, so a
// call finds its cache where a decode step would: out of the caches). Prints the
// time per call and the KV bytes read per second. Compare binaries in one run.
//
//   bench_paged_attention [S=64] [CTX=80] [H=8] [KV=8] [D=64] [LAYERS=8] [calls per round=40]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <torch/torch.h>

#include "nn/paged_attention.hpp"

int main(int argc, char** argv) {
  auto arg = [&](int i, int64_t def) { return argc > i ? std::atoll(argv[i]) : def; };
  const int64_t S = arg(1, 64), ctx = arg(2, 80), H = arg(3, 8), KV = arg(4, 8), D = arg(5, 64), layers = arg(6, 8),
                calls = arg(7, 40), block = 16;
  if (S < 1 || ctx < 1 || H < 1 || KV < 1 || H % KV != 0 || D < 1 || layers < 1 || calls < 1) {
    std::fprintf(stderr, "usage: %s [S] [CTX] [H] [KV (divides H)] [D] [LAYERS] [calls], all >= 1\n", argv[0]);
    return 2;
  }
  torch::set_num_threads(1);
  torch::manual_seed(0);
  const int64_t blocks_per_seq = (ctx + block - 1) / block, slots = S * blocks_per_seq * block;
  std::vector<torch::Tensor> k, v;
  for (int64_t l = 0; l < layers; ++l) {
    k.push_back(torch::randn({slots, KV, D}));
    v.push_back(torch::randn({slots, KV, D}));
  }
  // Sequence s's b-th block is block b * S + s: allocated round by round.
  auto ctx_slots = torch::empty({S, blocks_per_seq * block}, torch::kInt64);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t t = 0; t < blocks_per_seq * block; ++t)
      ctx_slots[s][t] = ((t / block) * S + s) * block + t % block;
  std::vector<int64_t> lens(static_cast<size_t>(S), ctx);
  auto q = torch::randn({S, H, D});
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  double sink = 0;
  for (int64_t l = 0; l < layers; ++l)  // warm-up
    sink += rl::nn::paged_decode_attention(q, k[l], v[l], ctx_slots, lens, scale)[0][0][0].item<double>();
  // The best of 10 rounds (a shared machine's noise only ever adds time).
  double s = 1e30;
  for (int round = 0; round < 10; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t c = 0; c < calls; ++c) {
      auto o = rl::nn::paged_decode_attention(q, k[c % layers], v[c % layers], ctx_slots, lens, scale);
      sink += o.data_ptr<float>()[0];
    }
    s = std::min(s, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls);
  }
  const double bytes = 2.0 * S * ctx * KV * D * sizeof(float);
  std::printf("RESULT impl=paged_attention S=%lld ctx=%lld H=%lld KV=%lld D=%lld us_per_call=%.1f kv_gb_s=%.2f (%g)\n",
              static_cast<long long>(S), static_cast<long long>(ctx), static_cast<long long>(H),
              static_cast<long long>(KV), static_cast<long long>(D), s * 1e6, bytes / s / 1e9, sink);
  return 0;
}
