// The critic's part of a trainer checkpoint (critic.hpp): its weights as one
// safetensors file and its AdamW state beside the policy's.
#include <optional>

#include "base/errors.hpp"
#include "model/tensor_files.hpp"
#include "trainer/checkpoint_state.hpp"
#include "trainer/critic.hpp"

namespace rl::trainer {

namespace fs = std::filesystem;

void save_critic(Critic& c, const fs::path& dir) {
  torch::NoGradGuard ng;
  std::vector<torch::Tensor> keep;  // contiguous CPU copies, alive until written
  std::vector<model::TensorToWrite> out;
  keep.reserve(c.named_parameters().size());
  for (const auto& [name, p] : c.named_parameters()) {
    keep.push_back(p.detach().to(torch::kCPU).contiguous());
    const auto& t = keep.back();
    out.push_back({name, nn::dtype_of(t.scalar_type()), t.sizes().vec(), t.data_ptr(), static_cast<size_t>(t.nbytes())});
  }
  model::write_safetensors(dir / kCriticFile, out);
  write_optimizer_state(c.optimizer(), c.named_parameters(), dir / kCriticOptimizerFile);
}

CriticRestore read_critic(Critic& c, const fs::path& dir) {
  const fs::path file = dir / kCriticFile;
  std::error_code ec;
  if (!fs::is_regular_file(file, ec) || !fs::is_regular_file(dir / kCriticOptimizerFile, ec))
    throw Error(dir.string() + ": no critic in this checkpoint (" + kCriticFile + ", " + kCriticOptimizerFile + ")",
                "it was saved without use_critic; resume it without --use-critic, or start the critic fresh "
                "from a new run");
  const auto set = model::read_safetensors(file);
  CriticRestore r;
  for (const auto& [name, p] : c.named_parameters()) {
    const auto* v = set.find(name);
    if (!v) throw Error(file.string() + ": tensor '" + name + "' is missing", "the critic was saved from another model");
    if (v->shape != p.sizes().vec())
      throw Error(file.string() + ": tensor '" + name + "' has another shape than the critic's",
                  "the critic was saved from another model");
    r.weights.push_back(nn::tensor_from_view(*v));
  }
  if (set.tensors.size() != c.named_parameters().size())
    throw Error(file.string() + ": " + std::to_string(set.tensors.size()) + " tensors, the critic has " +
                    std::to_string(c.named_parameters().size()),
                "the critic was saved from another model");
  auto slots = std::make_shared<std::vector<std::optional<AdamWSlot>>>(
      read_optimizer_state(dir / kCriticOptimizerFile, c.named_parameters()));
  r.apply_optimizer = [&c, slots] { apply_optimizer_state(c.optimizer(), c.named_parameters(), std::move(*slots)); };
  return r;
}

void CriticRestore::apply(Critic& c) const {
  {
    torch::NoGradGuard ng;
    const auto& named = c.named_parameters();
    for (size_t i = 0; i < named.size(); ++i) named[i].second.copy_(weights[i]);
  }
  c.weights_changed();
  apply_optimizer();
}

}  // namespace rl::trainer
