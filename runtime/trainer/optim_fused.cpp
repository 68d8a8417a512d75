#include "trainer/optim_fused.hpp"

#include <algorithm>

#include <ATen/ATen.h>

namespace rl::trainer {

double clip_grad_norm_foreach(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return 0.0;
  const auto norms = at::_foreach_norm(grads, 2);
  const double total = at::linalg_vector_norm(at::stack(norms), 2).item<double>();
  if (max_norm > 0) {
    const double coef = max_norm / (total + 1e-6);
    if (coef < 1.0) at::_foreach_mul_(grads, coef);
  }
  return total;
}

void FusedAdamW::step(torch::optim::AdamW& opt) {
  torch::NoGradGuard no_grad;
  struct Lists {
    Lists(c10::Device d, c10::ScalarType t) : device(d), dtype(t) {}
    c10::Device device;
    c10::ScalarType dtype;
    std::vector<torch::Tensor> ps, gs, m1, m2, vmax, steps;
  };
  size_t k = 0;  // index over every parameter with a gradient, in group order
  for (auto& group : opt.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    // The kernel takes tensors of one device and dtype (a LoRA adapter in float32
    // over a bf16 base, say): one call per kind, as torch.optim groups them.
    std::vector<Lists> kinds;  // almost always one
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& slot = opt.state()[p.unsafeGetTensorImpl()];
      if (!slot) {  // as torch::optim::AdamW creates it
        auto st = std::make_unique<torch::optim::AdamWParamState>();
        st->step(0);
        st->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        st->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        if (o.amsgrad()) st->max_exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        slot = std::move(st);
      }
      auto& st = static_cast<torch::optim::AdamWParamState&>(*slot);
      if (k >= steps_.size()) steps_.resize(k + 1), mirrored_.resize(k + 1, -1);
      if (mirrored_[k] != st.step() || !steps_[k].defined() || steps_[k].device() != p.device())
        steps_[k] = torch::full({}, static_cast<double>(st.step()), p.options().dtype(torch::kFloat32));
      st.step(st.step() + 1);
      mirrored_[k] = st.step();
      auto kind = std::find_if(kinds.begin(), kinds.end(),
                               [&](const Lists& l) { return l.device == p.device() && l.dtype == p.scalar_type(); });
      auto& l = kind != kinds.end() ? *kind : kinds.emplace_back(p.device(), p.scalar_type());
      l.ps.push_back(p);
      l.gs.push_back(p.grad());
      l.m1.push_back(st.exp_avg());
      l.m2.push_back(st.exp_avg_sq());
      if (o.amsgrad()) l.vmax.push_back(st.max_exp_avg_sq());
      l.steps.push_back(steps_[k]);
      ++k;
    }
    for (auto& l : kinds) {
      at::_foreach_add_(l.steps, 1.0);  // the kernel reads the incremented count, as torch.optim does
      at::_fused_adamw_(l.ps, l.gs, l.m1, l.m2, l.vmax, l.steps, o.lr(), std::get<0>(o.betas()),
                        std::get<1>(o.betas()), o.weight_decay(), o.eps(), o.amsgrad(), /*maximize=*/false);
      // The kernel writes the weights without moving their version counters, which
      // caches of derived forms read (packed panels, a LoRA adapter's merged head):
      // moved here, as torch::optim::AdamW's in-place ops move them.
      for (auto& p : l.ps) torch::autograd::impl::bump_version(p);
    }
  }
}

}  // namespace rl::trainer
