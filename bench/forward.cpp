// Training forward+backward throughput of rlhost's transformer (LibTorch, C++).
// The peer (bench/forward_torch.py, the same weights in transformers/PyTorch) runs
// in the same bench/forward.sh run; this prints one RESULT line.
//
//   bench_forward MODEL_DIR [batch=2] [seq=256] [iters=3] [threads=0 (LibTorch default)]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <torch/torch.h>

#include "nn/transformer.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR [batch] [seq] [iters] [threads]\n", argv[0]);
    return 2;
  }
  const int64_t batch = argc > 2 ? std::atoll(argv[2]) : 2;
  const int64_t seq = argc > 3 ? std::atoll(argv[3]) : 256;
  const int iters = argc > 4 ? std::atoi(argv[4]) : 3;
  if (argc > 5 && std::atoi(argv[5]) > 0) torch::set_num_threads(std::atoi(argv[5]));
  auto model = rl::nn::Transformer::from_pretrained(argv[1]);
  model->set_requires_grad(true);
  int64_t n_params = 0;
  for (const auto& [name, t] : model->named_parameters()) n_params += t.numel();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(0);
  auto ids = torch::randint(0, model->config().vocab_size, {batch, seq}, gen, torch::kInt64);

  auto step = [&] {
    auto lp = model->sequence_logprobs(ids).logprobs;
    auto loss = -lp.mean();
    loss.backward();
    for (const auto& [name, t] : model->named_parameters()) t.mutable_grad().reset();
    return loss.item<double>();
  };
  const double first_loss = step();  // warm-up (allocator, kernels)
  double best = 1e30;
  for (int i = 0; i < iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    step();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf("RESULT impl=rlhost params=%lld tokens=%lld threads=%d best_step_s=%.4f tok_per_s=%.1f loss=%.6f\n",
              static_cast<long long>(n_params), static_cast<long long>(batch * seq), torch::get_num_threads(), best,
              batch * seq / best, first_loss);
  return 0;
}
