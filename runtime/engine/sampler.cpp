#include "engine/sampler.hpp"

#include "nn/batch_invariant.hpp"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

namespace rl::engine {
namespace {

// Keeps tokens by top-k, then min-p, then top-p on probs (float, [V], sums to 1),
// zeroing the rest in place. Returns the kept mass.
double apply_filters(float* probs, int64_t V, const SamplingParams& p) {
  const bool use_k = p.top_k > 0 && p.top_k < V;
  const bool use_p = p.top_p < 1.0;
  const bool use_min_p = p.min_p > 0.0;
  if (!use_k && !use_p && !use_min_p) return 1.0;
  // Candidates in descending probability. Only the head matters for top-k and,
  // usually, top-p: take the top K and widen to the full sort when top-p needs it.
  int64_t K = use_k ? p.top_k : std::min<int64_t>(V, 256);
  std::vector<int32_t> idx(static_cast<size_t>(V));
  std::iota(idx.begin(), idx.end(), 0);
  auto by_prob = [&](int32_t a, int32_t b) { return probs[a] > probs[b] || (probs[a] == probs[b] && a < b); };
  for (;;) {
    std::partial_sort(idx.begin(), idx.begin() + K, idx.end(), by_prob);
    if (!use_p || K == V || use_k) break;
    double head = 0;
    for (int64_t i = 0; i < K; ++i) head += probs[idx[static_cast<size_t>(i)]];
    if (head >= p.top_p) break;
    K = std::min<int64_t>(V, K * 8);
  }
  int64_t keep = K;
  if (use_min_p) {
    const double floor_p = p.min_p * probs[idx[0]];
    int64_t k = 1;
    while (k < keep && probs[idx[static_cast<size_t>(k)]] >= floor_p) ++k;
    keep = k;
  }
  if (use_p) {
    // Smallest prefix whose mass reaches top_p (always at least one token).
    double cum = 0;
    int64_t k = 0;
    while (k < keep) {
      cum += probs[idx[static_cast<size_t>(k)]];
      ++k;
      if (cum >= p.top_p) break;
    }
    keep = k;
  }
  std::vector<float> kept(static_cast<size_t>(keep));
  double mass = 0;
  for (int64_t i = 0; i < keep; ++i) {
    kept[static_cast<size_t>(i)] = probs[idx[static_cast<size_t>(i)]];
    mass += kept[static_cast<size_t>(i)];
  }
  std::fill(probs, probs + V, 0.0f);
  for (int64_t i = 0; i < keep; ++i) probs[idx[static_cast<size_t>(i)]] = kept[static_cast<size_t>(i)];
  return mass;
}

// First index of the largest value (NaN-free rows; what torch.argmax returns),
// in one pass instead of a reduction kernel launch per row: sixteen lanes each
// keep their first maximum and its index (a strict >, so a later equal value
// never replaces it), then the first index among the lanes holding the maximum.
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
int32_t argmax_row(const float* __restrict row, int64_t n) {
  if (n < 16) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i)
      if (row[i] > row[best]) best = i;
    return static_cast<int32_t>(best);
  }
  float m[16];
  int32_t at[16];
  for (int k = 0; k < 16; ++k) m[k] = row[k], at[k] = k;
  int64_t i = 16;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) {
      const bool up = row[i + k] > m[k];
      m[k] = up ? row[i + k] : m[k];
      at[k] = up ? static_cast<int32_t>(i + k) : at[k];
    }
  int64_t best = at[0];
  for (int k = 1; k < 16; ++k)
    if (m[k] > row[best] || (m[k] == row[best] && at[k] < best)) best = at[k];
  for (; i < n; ++i)
    if (row[i] > row[best]) best = i;
  return static_cast<int32_t>(best);
}

// probs[i] = exp(row[i] - lse) with the batch-invariant exp (vectorised; the
// log-sum-exp came from the same exp).
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void exp_row(const float* __restrict row, float lse, float* __restrict probs, int64_t V) {
  for (int64_t i = 0; i < V; ++i) probs[i] = nn::bi::exp_inline(row[i] - lse);
}

// Inverse-CDF draw from unnormalised probs with total `mass`.
int32_t draw(const float* probs, int64_t V, double mass, std::mt19937_64& rng) {
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng) * mass;
  double cum = 0;
  int32_t last = -1;
  for (int64_t i = 0; i < V; ++i) {
    if (probs[i] <= 0) continue;
    cum += probs[i];
    last = static_cast<int32_t>(i);
    if (u < cum) return last;
  }
  return last;  // rounding: the last token with mass
}

double temperature_of(const SamplingParams& p) { return p.greedy() ? 1.0 : p.temperature; }

// The n most likely tokens of a row of z (logits / T) and their log-probs, given its log-sum-exp.
std::vector<std::pair<int32_t, float>> top_of(const torch::Tensor& z_row, int64_t n, double lse) {
  auto top = z_row.topk(std::min<int64_t>(n, z_row.size(0)));
  auto vals = std::get<0>(top).contiguous();
  auto ids = std::get<1>(top).contiguous();
  std::vector<std::pair<int32_t, float>> out;
  for (int64_t k = 0; k < vals.numel(); ++k)
    out.emplace_back(static_cast<int32_t>(ids.data_ptr<int64_t>()[k]),
                     static_cast<float>(static_cast<double>(vals.data_ptr<float>()[k]) - lse));
  return out;
}

}  // namespace

torch::Tensor filtered_probs(const torch::Tensor& logits_row, const SamplingParams& p) {
  auto row = logits_row.to(torch::kCPU, torch::kFloat32).contiguous();
  const double t = p.greedy() ? 1.0 : p.temperature;
  auto probs = torch::softmax(row / t, -1).contiguous();
  double mass = apply_filters(probs.data_ptr<float>(), probs.numel(), p);
  return probs / mass;
}

SampleOutput sample_tokens(const torch::Tensor& logits_in, const std::vector<SampleRow>& rows) {
  torch::NoGradGuard no_grad;
  if (logits_in.dim() != 2 || logits_in.size(0) != static_cast<int64_t>(rows.size()))
    throw std::invalid_argument("sample_tokens: logits must be [rows, vocab] with one row per request");
  const int64_t S = logits_in.size(0), V = logits_in.size(1);
  auto logits = logits_in.to(torch::kCPU, torch::kFloat32).contiguous();
  // Banned tokens (min_new_tokens) are removed before anything else.
  bool any_banned = false;
  for (const auto& r : rows) any_banned = any_banned || (r.banned && !r.banned->empty());
  if (any_banned && logits.is_same(logits_in)) logits = logits.clone();
  for (int64_t s = 0; s < S; ++s) {
    const auto* banned = rows[static_cast<size_t>(s)].banned;
    if (!banned) continue;
    float* row = logits.data_ptr<float>() + s * V;
    for (int32_t id : *banned)
      if (id >= 0 && id < V) row[id] = -std::numeric_limits<float>::infinity();
  }
  // The trainer's formula exactly (nn/logprobs.cpp): z = logits / T (a scalar
  // division, row by row), log p = z - logsumexp(z). Only the sampled token's
  // log p is read, so the full log-softmax is never materialised.
  auto z = logits;
  bool scaled = false;
  for (int64_t s = 0; s < S; ++s) {
    const double t = temperature_of(*rows[static_cast<size_t>(s)].params);
    if (t == 1.0) continue;
    if (!scaled) z = logits.clone(), scaled = true;
    z[s].copy_(logits[s] / t);
  }
  // log-sum-exp only for the rows that need it (sampling, or a log-prob to report).
  std::vector<int64_t> need;
  for (int64_t s = 0; s < S; ++s) {
    const SampleRow& r = rows[static_cast<size_t>(s)];
    if (!r.params->greedy() || r.need_logprob || r.top_logprobs_num > 0) need.push_back(s);
  }
  // The trainer's arithmetic exactly (nn::token_logprobs on the CPU): log-sum-exp
  // by bi::logsumexp in double, log p = z[token] - lse taken in double.
  std::vector<double> lse_rows(static_cast<size_t>(S), 0.0);
  at::parallel_for(0, static_cast<int64_t>(need.size()), 1, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t s = need[static_cast<size_t>(k)];
      lse_rows[static_cast<size_t>(s)] = nn::bi::logsumexp(z.data_ptr<float>() + s * V, V);
    }
  });

  SampleOutput out;
  out.tokens.resize(static_cast<size_t>(S));
  out.logprobs.resize(static_cast<size_t>(S));
  out.top_logprobs.resize(static_cast<size_t>(S));
  const float* zp = z.data_ptr<float>();
  const double* lp = lse_rows.data();
  // Rows in parallel: each draws from its own request's generator, so the tokens do
  // not depend on the split.
  at::parallel_for(0, S, std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(1, V)),
                   [&](int64_t s0, int64_t s1) {
    std::vector<float> probs;
    for (int64_t s = s0; s < s1; ++s) {
      const SampleRow& r = rows[static_cast<size_t>(s)];
      const float* row = zp + s * V;
      int32_t tok;
      if (r.params->greedy()) {
        tok = argmax_row(row, V);
      } else {
        probs.resize(static_cast<size_t>(V));
        exp_row(row, static_cast<float>(lp[s]), probs.data(), V);
        double mass = apply_filters(probs.data(), V, *r.params);
        tok = draw(probs.data(), V, mass, *r.rng);
      }
      out.tokens[static_cast<size_t>(s)] = tok;
      out.logprobs[static_cast<size_t>(s)] = static_cast<float>(static_cast<double>(row[tok]) - lp[s]);
    }
  });
  for (int64_t s = 0; s < S; ++s) {
    const SampleRow& r = rows[static_cast<size_t>(s)];
    if (r.top_logprobs_num > 0) out.top_logprobs[static_cast<size_t>(s)] = top_of(z[s], r.top_logprobs_num, lp[s]);
  }
  return out;
}

void score_tokens(const torch::Tensor& logits_in, const std::vector<ScoreRow>& rows, SampleOutput& out) {
  torch::NoGradGuard no_grad;
  if (logits_in.dim() != 2 || logits_in.size(0) != static_cast<int64_t>(rows.size()))
    throw std::invalid_argument("score_tokens: logits must be [rows, vocab] with one row per scored token");
  const int64_t R = logits_in.size(0), V = logits_in.size(1);
  // sample_tokens' arithmetic: z = logits / T row by row, log p = z[target] - lse in double.
  auto logits = logits_in.to(torch::kCPU, torch::kFloat32).contiguous();
  auto z = logits;
  bool scaled = false;
  for (int64_t r = 0; r < R; ++r) {
    const double t = temperature_of(*rows[static_cast<size_t>(r)].params);
    if (t == 1.0) continue;
    if (!scaled) z = logits.clone(), scaled = true;
    z[r].copy_(logits[r] / t);
  }
  std::vector<double> lse(static_cast<size_t>(R));
  std::vector<float> lp(static_cast<size_t>(R));
  const float* zp = z.data_ptr<float>();
  at::parallel_for(0, R, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const auto k = static_cast<size_t>(r);
      lse[k] = nn::bi::logsumexp(zp + r * V, V);
      lp[k] = static_cast<float>(static_cast<double>(zp[r * V + rows[k].target]) - lse[k]);
    }
  });
  for (int64_t r = 0; r < R; ++r) {
    const ScoreRow& row = rows[static_cast<size_t>(r)];
    out.input_logprobs.at(row.row).push_back(lp[static_cast<size_t>(r)]);
    if (row.top_logprobs_num > 0)
      out.input_top_logprobs.at(row.row).push_back(top_of(z[r], row.top_logprobs_num, lse[static_cast<size_t>(r)]));
  }
}

}  // namespace rl::engine
