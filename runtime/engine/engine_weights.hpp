// In-memory weight updates for an engine in this process (the trainer's
// colocated path): tensors under their Hugging Face names are copied into the
// live weights between two steps, the prefix cache is flushed, and the weight
// version moves on. Throws rl::Error naming an unknown name or a shape mismatch.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "engine/engine.hpp"

namespace rl::engine {

void update_weights(Engine& engine, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                    const std::optional<std::string>& weight_version = {});

}  // namespace rl::engine
