#include "nn/recompute.hpp"

#include <ATen/autocast_mode.h>

#include <stdexcept>
#include <utility>

namespace rl::nn {

namespace {

// The autocast state of one device type, taken now and put back later.
struct AutocastState {
  c10::DeviceType device = c10::DeviceType::CPU;
  bool enabled = false;
  at::ScalarType dtype = at::kBFloat16;

  static AutocastState of(c10::DeviceType d) {
    AutocastState s;
    s.device = d;
    if (!at::autocast::is_autocast_available(d)) return s;
    s.enabled = at::autocast::is_autocast_enabled(d);
    s.dtype = at::autocast::get_autocast_dtype(d);
    return s;
  }
  void set() const {
    if (!at::autocast::is_autocast_available(device)) return;
    at::autocast::set_autocast_enabled(device, enabled);
    at::autocast::set_autocast_dtype(device, dtype);
  }
};

// Sets a state for a scope, puts the one before back at its end.
class AutocastAs {
 public:
  explicit AutocastAs(const AutocastState& s) : prev_(AutocastState::of(s.device)) { s.set(); }
  ~AutocastAs() { prev_.set(); }
  AutocastAs(const AutocastAs&) = delete;
  AutocastAs& operator=(const AutocastAs&) = delete;

 private:
  AutocastState prev_;
};

// What the backward pass needs besides x, kept in the autograd context (saved_data holds
// IValues), as nn/logprobs*.cpp keep theirs: it lives as long as the graph does.
struct Pending : torch::CustomClassHolder {
  Block block;
  RecomputeHooks hooks;
  AutocastState autocast;
};

struct Recomputed : torch::autograd::Function<Recomputed> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               c10::intrusive_ptr<Pending> p) {
    auto y = p->block(x);  // autograd is off in a Function's forward: nothing is kept
    ctx->save_for_backward({x});
    ctx->saved_data["pending"] = c10::IValue::make_capsule(std::move(p));
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto capsule = ctx->saved_data["pending"].toCapsule();
    const auto* p = static_cast<const Pending*>(capsule.get());
    if (!grads.at(0).defined()) return {torch::Tensor(), torch::Tensor()};
    auto x = saved[0].detach().requires_grad_(true);
    torch::AutoGradMode on(true);
    if (p->hooks.begin) p->hooks.begin();
    struct End {  // end() also when the second pass or its backward throws
      const RecomputeHooks& h;
      ~End() {
        if (h.end) h.end();
      }
    } end{p->hooks};
    torch::Tensor y;
    {
      AutocastAs as(p->autocast);
      y = p->block(x);
    }
    if (!y.requires_grad())
      throw std::logic_error("recompute: the block's second pass does not depend on its input or any parameter");
    torch::autograd::backward({y}, {grads[0]});
    return {x.grad(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor recompute(const torch::Tensor& x, Block block, RecomputeHooks hooks) {
  if (!torch::GradMode::is_enabled()) return block(x);
  auto p = c10::make_intrusive<Pending>();
  p->block = std::move(block);
  p->hooks = std::move(hooks);
  p->autocast = AutocastState::of(x.device().type());
  // The block's parameters may need gradients when x does not (a LoRA adapter over a
  // frozen embedding): x then goes in as a leaf of its own, so the output is
  // differentiable and the backward pass reaches the block.
  const auto in = x.requires_grad() ? x : x.detach().requires_grad_(true);
  return Recomputed::apply(in, std::move(p));
}

}  // namespace rl::nn
