// The GRPO-family losses of slime (slime/utils/ppo_utils.py, megatron_utils/loss.py)
// on packed per-token tensors: KL estimators, advantages, policy losses (PPO-clip
// with dual clip, GSPO's sequence ratio, CISPO), truncated importance sampling,
// entropy bonus, KL loss, SFT loss, and the two loss aggregations.
//
// Layout: a micro-batch is B sequences; per-token tensors are [B, T] float32 over
// the response positions (padded on the right), with `mask` [B, T] float32 (the
// loss mask; padding is 0). Everything is differentiable with respect to `logp`
// (and `entropy`), never materialises vocabulary-sized tensors, and follows
// docs/trainer.md (checked against tests/e2e/loss_reference.py, a PyTorch restatement
// of slime's formulas, by tests/cpp/torch/test_loss_parity.cpp).
#pragma once
#include <map>
#include <optional>
#include <string>

#include <torch/torch.h>

namespace rl::trainer {

enum class KlType { k1, k2, k3, low_var_kl };
KlType parse_kl_type(const std::string& name);  // throws naming the choices
const char* kl_type_name(KlType t);

// log_r = logp − logp_base; k1 log_r, k2 log_r²/2, k3 / low_var_kl exp(−log_r) − 1 + log_r;
// × importance_ratio when defined; low_var_kl clamped to [−10, 10].
torch::Tensor approx_kl(const torch::Tensor& logp, const torch::Tensor& logp_base, KlType type,
                        const torch::Tensor& importance_ratio = {});

enum class Estimator { grpo, gspo, cispo, reinforce_plus_plus, reinforce_plus_plus_baseline, ppo };
Estimator parse_estimator(const std::string& name);  // throws naming the choices
const char* estimator_name(Estimator e);

struct AdvantageInputs {
  torch::Tensor rewards;   // [B] (group-normalised for grpo/gspo/cispo/rf++-baseline: done by the rollout; raw for ppo)
  torch::Tensor mask;      // [B, T]
  torch::Tensor kl;        // [B, T] per-token KL (zeros when kl_coef == 0), may be undefined
  double kl_coef = 0.0;
  double gamma = 1.0;      // reinforce_plus_plus and ppo (GAE) discount
  bool normalize = false;  // masked whitening over the batch (required by both reinforce++ variants)
  // ppo only: the critic's values V_old [B, T] (zero on padding) and each sample's
  // response length [B] (int64): GAE runs over the whole response, loss mask or not,
  // and the reward lands on its last token (slime's get_advantages_and_returns_batch).
  torch::Tensor values;
  torch::Tensor response_lengths;
  double lambd = 1.0;      // GAE's λ
};
// Returns {advantages, returns}, both [B, T] (zero outside the mask). ppo: token
// rewards r_t = −kl_coef·kl_t, plus the sequence reward on the response's last token;
// δ_t = r_t + γ·V_{t+1} − V_t (V past the response = 0), A_t = δ_t + γλ·A_{t+1},
// returns = A + V (gae below). With
// `normalize`, advantages are whitened and returns are left as computed (as slime).
// No gradient flows through either. Throws std::invalid_argument on bad shapes and on
// kl missing while kl_coef != 0 (reinforce++ variants). slime requires normalize for
// both reinforce++ variants; the trainer enforces it (and whitens over the whole step).
std::pair<torch::Tensor, torch::Tensor> compute_advantages(Estimator est, const AdvantageInputs& in);

// Generalised advantage estimation over [B, T] (rows right-padded with zero rewards and
// values): {advantages, returns = advantages + values}. A sequential scan in float64
// on the CPU, like the discounted returns. No gradient.
std::pair<torch::Tensor, torch::Tensor> gae(const torch::Tensor& token_rewards, const torch::Tensor& values,
                                            double gamma, double lambd);

// Masked whitening: mean = Σ(a·m)/Σm, var = (Σ(a²m)/Σm − mean²)·N/(N−1) with N = Σm,
// (a − mean)/sqrt(var + 1e-8); zero outside the mask. Sums in float64. Throws when
// N <= 1 (the unbiased variance is undefined), like slime.
torch::Tensor whiten(const torch::Tensor& a, const torch::Tensor& mask);

enum class Aggregation { sample_mean, token_mean };
Aggregation parse_aggregation(const std::string& name);  // "sample_mean" | "token_mean"

struct LossOptions {
  Estimator estimator = Estimator::grpo;
  double eps_clip = 0.2;
  std::optional<double> eps_clip_high;  // defaults to eps_clip
  std::optional<double> eps_clip_c;     // dual clip (> 1)
  double entropy_coef = 0.0;
  bool use_kl_loss = false;
  double kl_loss_coef = 0.0;
  KlType kl_loss_type = KlType::k1;  // slime's --kl-loss-type default
  bool use_unbiased_kl = false;
  // Truncated importance sampling against the rollout's log-probs (slime's --use-tis):
  // weights exp(old_logp − rollout_logp), detached.
  bool use_tis = false;
  std::string tis_mode = "clamp";  // "clamp" (vanilla) | "icepop" (zero outside [low, high])
  double tis_clip_low = 0.0;
  double tis_clip = 2.0;
  Aggregation aggregation = Aggregation::sample_mean;  // token_mean = --calculate-per-token-loss
  bool sft = false;  // loss = −reduce(logp)
};

struct LossInputs {
  torch::Tensor logp;               // [B, T] current policy, requires grad
  torch::Tensor old_logp;           // [B, T] behaviour log-probs (rollout's with use_rollout_logprobs), detached;
                                    // undefined = logp.detach() (the first, on-policy step)
  torch::Tensor advantages;         // [B, T]
  torch::Tensor mask;               // [B, T]
  torch::Tensor entropy;            // [B, T] when entropy_coef != 0 (differentiable)
  torch::Tensor ref_logp;           // [B, T] when use_kl_loss
  torch::Tensor rollout_logp;       // [B, T] when use_tis (and for train_rollout_logprob_abs_diff)
  torch::Tensor sample_denoms;      // [B] per-sample denominators for sample_mean (default Σ_t mask)
  // The normaliser across gradient accumulation: the step's sample count
  // (sample_mean) or token count Σ_i max(Σ_t m_it, 1) (token_mean); 0 = this
  // micro-batch's own.
  // With it, summing the micro-batch losses gives the global batch's loss.
  double divisor = 0.0;
};

struct LossResult {
  torch::Tensor loss;  // scalar, differentiable
  // train/ metrics as scalars (detached): loss, pg_loss, pg_clipfrac, ppo_kl, entropy_loss,
  // kl_loss, tis, tis_clipfrac, tis_abs, ois, tis_weight, tis_weight_sq, train_rollout_logprob_abs_diff — the ones that apply,
  // each reduced like the loss (so micro-batch metrics sum to the step's).
  std::map<std::string, torch::Tensor> metrics;
  // [B, T] 1 where the token's ratio was clipped (policy loss), detached; undefined for SFT.
  // Per-sample views of the step for traces.
  torch::Tensor clipped;
};

// Reduction of a [B, T] per-token quantity: sample_mean Σ_i Σ_t x·m / max(D_i, 1) / divisor
// (D_i = sample_denoms or Σ_t m; divisor 0 → max(B, 1)); token_mean Σ x·m / divisor
// (0 → Σ_i max(Σ_t m_it, 1), slime's num_tokens: a fully masked sample counts as one token).
torch::Tensor reduce(const torch::Tensor& x, const torch::Tensor& mask, Aggregation agg,
                     const torch::Tensor& sample_denoms = {}, double divisor = 0.0);

// The critic's clipped value loss (slime's value_loss_function):
//   V_clip = V_old + clamp(V − V_old, −value_clip, value_clip)
//   loss   = reduce(max((V − R)², (V_clip − R)²))     (no ½, as slime)
// metrics value_loss and value_clipfrac (share of tokens with |V − V_old| > value_clip),
// reduced like the policy loss (aggregation, sample_denoms, divisor: see reduce).
struct ValueLossInputs {
  torch::Tensor values;      // [B, T] the critic's, requires grad
  torch::Tensor old_values;  // [B, T] V_old (no grad), the values the returns were built on
  torch::Tensor returns;     // [B, T]
  torch::Tensor mask;        // [B, T]
  torch::Tensor sample_denoms;
  double divisor = 0.0;
};
LossResult value_loss(double value_clip, Aggregation agg, const ValueLossInputs& in);

// The full loss of one micro-batch (policy loss, or SFT when opts.sft). Throws
// std::invalid_argument naming the field (and a hint) on missing or mis-shaped
// tensors, NaN or out-of-range options (eps_clip_c <= 1, tis_clip_low > tis_clip, …).
// Positions outside the mask cannot poison the result: log-ratios are zeroed there
// before exp, so garbage log-probs in padding give neither inf nor NaN.
LossResult policy_loss(const LossOptions& opts, const LossInputs& in);

}  // namespace rl::trainer
