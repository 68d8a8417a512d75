// The trainer's multi-tensor optimiser step (runtime/trainer/optim_fused.hpp) against
// torch::optim::AdamW and clip_grad_norm_: the same weights up to rounding, the same
// state, and the weights' version counters moved as AdamW's in-place ops move them.
#include <torch/torch.h>

#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

#include "trainer/optim_fused.hpp"

using rl::trainer::clip_grad_norm_foreach;
using rl::trainer::FusedAdamW;

namespace {

std::vector<torch::Tensor> params_like(uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<torch::Tensor> ps{torch::randn({64, 32}), torch::randn({32}), torch::randn({7, 5, 3})};
  for (auto& p : ps) p.requires_grad_(true);
  return ps;
}

void set_grads(std::vector<torch::Tensor>& ps, int step, double scale) {
  for (size_t i = 0; i < ps.size(); ++i) {
    torch::manual_seed(1000 * step + static_cast<int>(i));
    ps[i].mutable_grad() = torch::randn(ps[i].sizes()) * scale;
  }
}

}  // namespace

CATCH_TEST_CASE("fused AdamW matches torch::optim::AdamW, state and all", "[trainer]") {
  for (bool amsgrad : {false, true}) {
    auto a = params_like(1), b = params_like(1);
    torch::optim::AdamWOptions o(3e-3);
    o.betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1).amsgrad(amsgrad);
    torch::optim::AdamW ref(a, o), opt(b, o);
    FusedAdamW fused;
    for (int step = 1; step <= 5; ++step) {
      set_grads(a, step, 0.5);
      set_grads(b, step, 0.5);
      ref.step();
      fused.step(opt);
    }
    for (size_t i = 0; i < a.size(); ++i) {
      CATCH_CHECK((a[i] - b[i]).abs().max().item<double>() < 1e-6);
      auto& sa = static_cast<torch::optim::AdamWParamState&>(*ref.state()[a[i].unsafeGetTensorImpl()]);
      auto& sb = static_cast<torch::optim::AdamWParamState&>(*opt.state()[b[i].unsafeGetTensorImpl()]);
      CATCH_CHECK(sa.step() == 5);
      CATCH_CHECK(sb.step() == 5);
      CATCH_CHECK((sa.exp_avg() - sb.exp_avg()).abs().max().item<double>() < 1e-6);
      CATCH_CHECK((sa.exp_avg_sq() - sb.exp_avg_sq()).abs().max().item<double>() < 1e-6);
    }
    // The weights moved: a step that changes nothing would pass the comparison too.
    CATCH_CHECK((a[0] - params_like(1)[0]).abs().max().item<double>() > 1e-3);
  }
}

// Caches of a weight's derived forms (the packed panels of nn/transformer.cpp, a LoRA
// adapter's merged lm_head in the engine) are keyed by the tensor's version counter;
// _fused_adamw_ writes the weights without moving it, so a trainer whose step left it
// unchanged went on with stale panels (its loss barely fell).
CATCH_TEST_CASE("fused AdamW moves every stepped weight's version, as AdamW does", "[trainer]") {
  auto a = params_like(5), b = params_like(5);
  torch::optim::AdamW ref(a, torch::optim::AdamWOptions(1e-2)), opt(b, torch::optim::AdamWOptions(1e-2));
  FusedAdamW fused;
  set_grads(a, 1, 1.0), set_grads(b, 1, 1.0);
  b[1].mutable_grad() = torch::Tensor();  // no gradient: not stepped, version kept
  std::vector<int64_t> va, vb;
  for (size_t i = 0; i < a.size(); ++i) va.push_back(a[i]._version()), vb.push_back(b[i]._version());
  ref.step();
  fused.step(opt);
  for (size_t i = 0; i < a.size(); ++i) {
    CATCH_CHECK(a[i]._version() > va[i]);
    if (i == 1) CATCH_CHECK(b[i]._version() == vb[i]);
    else CATCH_CHECK(b[i]._version() > vb[i]);
  }
}

// One group's tensors of two dtypes (a float32 adapter over a float64 or bf16 base,
// say): the kernel takes one dtype per call.
CATCH_TEST_CASE("fused AdamW steps a group of mixed dtypes like AdamW", "[trainer]") {
  auto a = params_like(6), b = params_like(6);
  for (auto* ps : {&a, &b}) (*ps)[1] = (*ps)[1].detach().to(torch::kFloat64).requires_grad_(true);
  torch::optim::AdamW ref(a, torch::optim::AdamWOptions(1e-2)), opt(b, torch::optim::AdamWOptions(1e-2));
  FusedAdamW fused;
  for (int step = 1; step <= 3; ++step) {
    for (auto* ps : {&a, &b}) {
      set_grads(*ps, step, 1.0);
      (*ps)[1].mutable_grad() = (*ps)[1].grad().to(torch::kFloat64);
    }
    ref.step();
    fused.step(opt);
  }
  for (size_t i = 0; i < a.size(); ++i) {
    CATCH_CHECK(b[i].scalar_type() == a[i].scalar_type());
    CATCH_CHECK((a[i] - b[i]).abs().max().item<double>() < 1e-6);
  }
}

CATCH_TEST_CASE("fused AdamW resumes from a state it did not make (a loaded checkpoint)", "[trainer]") {
  auto a = params_like(2), b = params_like(2);
  torch::optim::AdamWOptions o(1e-2);
  torch::optim::AdamW ref(a, o), opt(b, o);
  FusedAdamW fused;
  set_grads(a, 1, 1.0), set_grads(b, 1, 1.0);
  ref.step(), opt.step();  // both plain: the state comes from AdamW
  for (int step = 2; step <= 3; ++step) {
    set_grads(a, step, 1.0), set_grads(b, step, 1.0);
    ref.step();
    fused.step(opt);
  }
  for (size_t i = 0; i < a.size(); ++i) CATCH_CHECK((a[i] - b[i]).abs().max().item<double>() < 1e-6);
}

CATCH_TEST_CASE("foreach gradient clipping matches clip_grad_norm_", "[trainer]") {
  for (double scale : {0.01, 10.0}) {  // below and above the limit
    auto a = params_like(3), b = params_like(3);
    set_grads(a, 7, scale), set_grads(b, 7, scale);
    const double ra = torch::nn::utils::clip_grad_norm_(a, 1.0);
    const double rb = clip_grad_norm_foreach(b, 1.0);
    CATCH_CHECK(std::abs(ra - rb) <= 1e-5 * ra);
    for (size_t i = 0; i < a.size(); ++i) CATCH_CHECK((a[i].grad() - b[i].grad()).abs().max().item<double>() < 1e-7);
  }
  auto c = params_like(4);
  set_grads(c, 8, 3.0);
  const auto before = c[0].grad().clone();
  const double n = clip_grad_norm_foreach(c, 0.0);  // 0: the norm only
  CATCH_CHECK(n > 1.0);
  CATCH_CHECK(torch::equal(before, c[0].grad()));
}
