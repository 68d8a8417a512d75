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
#include "nn/lora.hpp"

namespace rl::engine {

// A LoRA adapter from memory (a colocated trainer's): the engine takes a copy on its
// device and adds it under `name`, or replaces the adapter of that name in place
// between two steps (Engine::load_lora_adapter's semantics). Throws rl::Error on an
// adapter for another model shape or a bad name.
LoraInfo load_lora_adapter(Engine& engine, const std::string& name, const nn::LoraAdapter& adapter,
                           const std::optional<std::string>& weight_version = {});

void update_weights(Engine& engine, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                    const std::optional<std::string>& weight_version = {});

}  // namespace rl::engine
