// One engine step described for the GPU in a single int32 buffer, the only thing a
// step copies to the device (GpuStepper, runtime/engine/gpu_step.hpp): per new token
// its id, position, cache slot, table row and context length; per sequence the index
// of its last token, the temperature and the uniform draw of its sample (float bits);
// then the block tables. Plain host code, tested on the CPU (tests/cpp/torch/test_engine.cpp).
#pragma once
#include <cstdint>
#include <vector>

#include "engine/sampler.hpp"
#include "engine/sequence.hpp"

namespace rl::engine {

struct StepLayout {
  int64_t n = 0, s = 0, w = 0;  // tokens, sequences, table width (blocks)
  int64_t ids() const { return 0; }
  int64_t pos() const { return n; }
  int64_t slot() const { return 2 * n; }
  int64_t seq() const { return 3 * n; }
  int64_t ctx() const { return 4 * n; }
  int64_t last() const { return 5 * n; }
  int64_t temp() const { return 5 * n + s; }
  int64_t u() const { return 5 * n + 2 * s; }
  int64_t tables() const { return 5 * n + 3 * s; }
  int64_t total() const { return tables() + s * w; }
};

// Writes the batch's uncomputed tokens into h (laid out by L; L.n and L.s at least
// the batch's tokens and sequences, L.w at least its longest block table). Tokens
// up to pad_n and sequences up to pad_s past the batch become padding (slot -1 and
// context 0: they store and read nothing). A sequence sampled on the GPU (not
// greedy, not on_cpu) draws its u from its own generator, so a seeded request
// samples the same tokens however it is batched. With `ahead`, sequence i's one
// input is the token the step in flight samples in its row ahead[i]: id -1 -
// ahead[i] (the device resolves it), at position tokens.size(). Returns the largest
// position.
int64_t fill_step_batch(int32_t* h, const StepLayout& L, const std::vector<Sequence*>& batch,
                        const std::vector<SampleRow>& rows, const std::vector<char>& on_cpu, int64_t block_size,
                        int64_t pad_n, int64_t pad_s, const std::vector<int32_t>* ahead = nullptr);

// Rows the GPU sampler cannot take (filters, banned tokens, top log-probs): the CPU sampler's.
bool needs_cpu_sampler(const SampleRow& r, int64_t vocab);

}  // namespace rl::engine
