// Our kernels split work over threads (at::parallel_for over output rows, column
// panels, heads' queries), never inside one output's reduction: one thread and two
// must give the same bits. Shapes are large enough that every kernel's grain lets
// it split (the small shapes of test_batch_invariant.cpp mostly run on one thread).
#include <torch/torch.h>

#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

#include <ATen/Parallel.h>

#include <functional>
#include <vector>

#include "model/config.hpp"
#include "nn/batch_invariant.hpp"
#include "nn/batch_invariant_ops.hpp"
#include "nn/logprobs.hpp"
#include "nn/paged_attention.hpp"
#include "nn/rope.hpp"
#include "nn/transformer.hpp"
#include "tensor/torch_env.hpp"

namespace bi = rl::nn::bi;

namespace {

// f() on one thread, then on two; the thread count is restored after.
std::vector<torch::Tensor> on_threads(int n, const std::function<std::vector<torch::Tensor>()>& f) {
  const int before = at::get_num_threads();
  at::set_num_threads(n);
  auto out = f();
  at::set_num_threads(before);
  return out;
}

void check_same_bits(const std::function<std::vector<torch::Tensor>()>& f) {
  auto one = on_threads(1, f), two = on_threads(2, f);
  CATCH_REQUIRE(one.size() == two.size());
  for (size_t i = 0; i < one.size(); ++i) {
    CATCH_INFO("output " << i);
    CATCH_CHECK(torch::equal(one[i], two[i]));
  }
}

}  // namespace

CATCH_TEST_CASE("our kernels run on LibTorch's intra-op threads", "[bi][threads]") {
  // Without the backend's compile flags at::parallel_for silently runs on the
  // calling thread alone (cmake/Torch.cmake).
  on_threads(2, [] {
    CATCH_CHECK(rl::tensor::torch_info().kernel_threads == 2);
    return std::vector<torch::Tensor>{};
  });
}

CATCH_TEST_CASE("the exact kernels give the same bits on one thread and on two", "[bi][threads]") {
  torch::NoGradGuard ng;
  torch::manual_seed(21);
  const int64_t K = 256, N = 1000;
  auto w = torch::randn({N, K});
  auto w_kn = w.t().contiguous().t();
  auto b = torch::randn({N});
  auto x = torch::randn({300, K});
  const auto packed = bi::pack(w_kn);
  for (int64_t m : {1, 4, 8, 9, 64, 300}) {
    CATCH_INFO("rows " << m);
    auto xm = x.narrow(0, 0, m);
    check_same_bits([&] {
      return std::vector<torch::Tensor>{bi::linear(xm, w, b), bi::linear(xm, w_kn, b), bi::linear(xm, w_kn, b, packed)};
    });
  }
  auto h = torch::randn({300, 512}), nw = torch::randn({512}), u = torch::randn({300, 512});
  check_same_bits([&] { return std::vector<torch::Tensor>{bi::rms_norm(h, nw, 1e-5), bi::silu_mul(h, u)}; });

  // Decode attention: 64 sequences of assorted lengths over scattered slots.
  const int64_t S = 64, H = 8, KV = 4, D = 64, width = 70, slots = S * width;
  auto kc = torch::randn({slots, KV, D}), vc = torch::randn({slots, KV, D});
  auto table = torch::randperm(slots, torch::kInt64).view({S, width}).contiguous();
  std::vector<int64_t> ctx;
  for (int64_t s = 0; s < S; ++s) ctx.push_back(1 + (s * 37) % width);
  auto q = torch::randn({S, H, D});
  check_same_bits([&] {
    return std::vector<torch::Tensor>{rl::nn::paged_decode_attention(q, kc, vc, table, ctx, 0.125)};
  });
  // Prefill attention (the trainer's causal path) and RoPE.
  auto qs = torch::randn({3, 40, H, D}), ks = torch::randn({3, 40, KV, D}), vs = torch::randn({3, 40, KV, D});
  auto cos = torch::randn({3, 40, D}), sin = torch::randn({3, 40, D});
  check_same_bits([&] {
    return std::vector<torch::Tensor>{bi::causal_attention(qs, ks.repeat_interleave(2, 2), vs.repeat_interleave(2, 2), 0.125),
                                      rl::nn::apply_rope(qs, cos, sin)};
  });
  // Log-probs of chosen tokens against a vocabulary-sized head.
  auto head = torch::randn({5000, K}) * 0.1;
  auto targets = torch::randint(0, 5000, {300}, torch::kInt64);
  check_same_bits([&] {
    auto r = rl::nn::token_logprobs(x, head, targets, 0.8, true);
    return std::vector<torch::Tensor>{r.logprobs, r.entropy};
  });
}

CATCH_TEST_CASE("the exact kernels' own gradients give the same bits on one thread and on two", "[bi][threads]") {
  torch::manual_seed(22);
  auto x = torch::randn({300, 512}), nw = torch::randn({512}), u = torch::randn({300, 512});
  auto g = torch::randn({300, 512});
  check_same_bits([&] {
    auto xr = x.clone().requires_grad_(true), wr = nw.clone().requires_grad_(true), ur = u.clone().requires_grad_(true);
    auto gx = torch::autograd::grad({bi::rms_norm(xr, wr, 1e-5)}, {xr, wr}, {g});
    auto gs = torch::autograd::grad({bi::silu_mul(xr, ur)}, {xr, ur}, {g});
    return std::vector<torch::Tensor>{gx[0], gx[1], gs[0], gs[1]};
  });
}

CATCH_TEST_CASE("a model's sequence log-probs are the same bits on one thread and on two", "[bi][threads]") {
  nlohmann::json j = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"vocab_size", 3000},
                      {"hidden_size", 256}, {"intermediate_size", 688}, {"num_hidden_layers", 2},
                      {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"max_position_embeddings", 256},
                      {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0}, {"torch_dtype", "float32"},
                      {"tie_word_embeddings", true}};
  rl::nn::Transformer model(rl::model::ModelConfig::from_json(j, "threads test config"));
  model.init_random(5);
  auto ids = torch::randint(0, 3000, {4, 70}, torch::kInt64);
  check_same_bits([&] { return std::vector<torch::Tensor>{model.sequence_logprobs(ids, 1.0).logprobs}; });
}
