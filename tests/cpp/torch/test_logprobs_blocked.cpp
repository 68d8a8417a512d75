// nn::token_logprobs_blocked (the sharded trainer's lm_head by row blocks) against
// nn::token_logprobs over the whole weight: log-probs and entropies bit for bit
// (float32 on the CPU), gradients equal up to summation order; one pass or several,
// kept or recomputed, uneven and empty blocks, temperature.
#include <torch/torch.h>

#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

#include "nn/logprobs.hpp"
#include "nn/logprobs_blocked.hpp"

using rl::nn::HeadBlocks;

namespace {

struct Run {
  torch::Tensor logprobs, entropy, grad_hidden, grad_weight;
  int fetches = 0, gives = 0;
};

torch::Tensor close_enough(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() <= 1e-5 * (1 + b.abs().max()));
}

Run whole(const torch::Tensor& h0, const torch::Tensor& w0, const torch::Tensor& t, double temp) {
  auto h = h0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
  auto out = rl::nn::token_logprobs(h, w, t, temp, true);
  (out.logprobs.sum() * 0.7 + 0.3 * out.entropy.sum()).backward();
  return {out.logprobs.detach(), out.entropy.detach(), h.grad(), w.grad()};
}

Run blocked(const torch::Tensor& h0, const torch::Tensor& w0, const torch::Tensor& t, double temp,
            std::vector<int64_t> rows, int64_t pass_rows, int64_t keep_logits, int64_t others_passes = 0) {
  Run r;
  r.grad_weight = torch::zeros_like(w0);
  HeadBlocks head;
  head.rows = std::move(rows);
  head.hidden = w0.size(1);
  head.pass_rows = pass_rows;
  head.keep_logits = keep_logits;
  head.fetch = [&](size_t b) -> std::function<torch::Tensor()> {
    ++r.fetches;
    auto block = w0.narrow(0, head.rows[b], head.rows[b + 1] - head.rows[b]);
    return [block] { return block; };
  };
  head.give = [&](size_t b, const torch::Tensor& g) {
    ++r.gives;
    r.grad_weight.narrow(0, head.rows[b], g.size(0)).add_(g);
  };
  head.max_over_ranks = [others_passes](int64_t v) { return std::max(v, others_passes); };
  auto h = h0.clone().requires_grad_(true);
  auto out = rl::nn::token_logprobs_blocked(h, head, t, temp, true);
  (out.logprobs.sum() * 0.7 + 0.3 * out.entropy.sum()).backward();
  r.logprobs = out.logprobs.detach();
  r.entropy = out.entropy.detach();
  r.grad_hidden = h.grad();
  return r;
}

}  // namespace

CATCH_TEST_CASE("the lm_head by row blocks: token_logprobs' log-probs bit for bit, its gradients", "[logprobs]") {
  torch::manual_seed(3);
  const int64_t N = 13, V = 301, H = 40;
  const auto h = torch::randn({N, H}), w = torch::randn({V, H}) * 0.3;
  const auto t = torch::randint(0, V, {N}, torch::kInt64);
  for (const double temp : {1.0, 0.7}) {
    const Run ref = whole(h, w, t, temp);
    struct Case {
      const char* name;
      std::vector<int64_t> rows;
      int64_t pass_rows, keep;
    };
    for (const Case& c : {Case{"one block", {0, V}, 0, -1}, Case{"uneven blocks", {0, 77, 154, 231, V}, 0, -1},
                          Case{"an empty block", {0, 100, 100, V}, 0, -1},
                          Case{"passes, all kept", {0, 151, V}, 4, -1},
                          Case{"passes, recomputed", {0, 151, V}, 4, 0}}) {
      CATCH_SECTION(std::string(c.name) + " at temperature " + std::to_string(temp)) {
        const Run got = blocked(h, w, t, temp, c.rows, c.pass_rows, c.keep);
        CATCH_REQUIRE(torch::equal(got.logprobs, ref.logprobs));
        CATCH_REQUIRE(torch::equal(got.entropy, ref.entropy));
        CATCH_REQUIRE(close_enough(got.grad_hidden, ref.grad_hidden).item<bool>());
        CATCH_REQUIRE(close_enough(got.grad_weight, ref.grad_weight).item<bool>());
        int nonempty = 0;
        for (size_t b = 0; b + 1 < c.rows.size(); ++b) nonempty += c.rows[b + 1] > c.rows[b];
        const int passes = c.pass_rows > 0 ? static_cast<int>((N + c.pass_rows - 1) / c.pass_rows) : 1;
        CATCH_REQUIRE(got.fetches == nonempty * (passes + 1));  // each forward pass, then the backward pass
        CATCH_REQUIRE(got.gives == nonempty);
      }
    }
  }
}

CATCH_TEST_CASE("the lm_head by row blocks: a rank without tokens still fetches and gives every block", "[logprobs]") {
  const int64_t V = 50, H = 8;
  const auto w = torch::randn({V, H});
  // Another rank has two passes' worth of tokens: this one goes over the blocks as often.
  const Run got = blocked(torch::zeros({0, H}), w, torch::zeros({0}, torch::kInt64), 1.0, {0, 20, V}, 0, -1, 2);
  CATCH_REQUIRE(got.logprobs.numel() == 0);
  CATCH_REQUIRE(got.fetches == 6);
  CATCH_REQUIRE(got.gives == 2);
  CATCH_REQUIRE(got.grad_weight.abs().max().item<float>() == 0.0f);
}

CATCH_TEST_CASE("the lm_head by row blocks refuses bad bounds and targets, naming them", "[logprobs]") {
  const int64_t V = 10, H = 4;
  const auto w = torch::randn({V, H});
  CATCH_REQUIRE_THROWS_WITH(blocked(torch::zeros({2, H}), w, torch::tensor({1, 10}), 1.0, {0, V}, 0, -1),
                            Catch::Contains("target id 10 outside the vocabulary [0, 10)"));
  CATCH_REQUIRE_THROWS_WITH(blocked(torch::zeros({1, H}), w, torch::tensor({1}), 1.0, {0, 6, 4, V}, 0, -1),
                            Catch::Contains("must not decrease"));
}
