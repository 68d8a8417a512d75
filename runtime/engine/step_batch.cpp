#include "engine/step_batch.hpp"

#include <algorithm>
#include <cstring>
#include <random>

namespace rl::engine {
namespace {

int32_t bits(float f) {
  int32_t i;
  std::memcpy(&i, &f, sizeof i);
  return i;
}

}  // namespace

bool needs_cpu_sampler(const SampleRow& r, int64_t vocab) {
  const SamplingParams& p = *r.params;
  if (r.top_logprobs_num > 0 || (r.banned && !r.banned->empty())) return true;
  if (p.greedy()) return false;
  return (p.top_k > 0 && p.top_k < vocab) || p.top_p < 1.0 || p.min_p > 0.0;
}

int64_t fill_step_batch(int32_t* h, const StepLayout& L, const std::vector<Sequence*>& batch,
                        const std::vector<SampleRow>& rows, const std::vector<char>& on_cpu, int64_t bs,
                        int64_t pad_n, int64_t pad_s, const std::vector<int32_t>* ahead) {
  int64_t t = 0, max_pos = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const Sequence& s = *batch[i];
    const auto row = static_cast<int64_t>(i);
    const int64_t have = static_cast<int64_t>(s.tokens.size());
    const int64_t end = ahead ? have + 1 : have;
    for (int64_t j = ahead ? have : s.num_computed; j < end; ++j, ++t) {
      h[L.ids() + t] = j < have ? s.tokens[static_cast<size_t>(j)] : -1 - (*ahead)[i];
      h[L.pos() + t] = static_cast<int32_t>(j);
      h[L.slot() + t] = static_cast<int32_t>(s.blocks[static_cast<size_t>(j / bs)] * bs + j % bs);
      h[L.seq() + t] = static_cast<int32_t>(row);
      h[L.ctx() + t] = static_cast<int32_t>(j + 1);
    }
    max_pos = std::max(max_pos, end - 1);
    const SamplingParams& p = *rows[i].params;
    const bool sample = !p.greedy() && !on_cpu[i];
    h[L.last() + row] = static_cast<int32_t>(t - 1);
    h[L.temp() + row] = bits(p.greedy() ? 0.0f : static_cast<float>(p.temperature));
    // u < 1 in float too (a double just under 1 rounds up to 1.0f).
    const float u =
        sample ? std::min(static_cast<float>(std::uniform_real_distribution<double>(0.0, 1.0)(*rows[i].rng)),
                          0.99999994f)
               : 0.0f;
    h[L.u() + row] = bits(u);
    std::copy(s.blocks.begin(), s.blocks.end(), h + L.tables() + row * L.w);
  }
  for (; t < pad_n; ++t) {
    h[L.ids() + t] = 0, h[L.pos() + t] = 0, h[L.slot() + t] = -1, h[L.seq() + t] = 0, h[L.ctx() + t] = 0;
  }
  for (auto i = static_cast<int64_t>(batch.size()); i < pad_s; ++i)
    h[L.last() + i] = 0, h[L.temp() + i] = 0, h[L.u() + i] = 0;
  return max_pos;
}

}  // namespace rl::engine
