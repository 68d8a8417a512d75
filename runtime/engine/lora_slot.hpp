// A loaded LoRA adapter as the engine holds it: the adapter (nn/lora.hpp) under a
// name, and the root its prefix-cache chains start from. Sequences point at their
// slot; a replacement (load_lora_adapter over a loaded name, or a sync) swaps the
// adapter and the root between two steps on the scheduler thread, so every request
// under that name sees the new tensors and no block computed under the old ones is
// matched again (BlockManager: a chain's first hash covers its root). Torch-free.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace rl::nn {
class LoraAdapter;
}

namespace rl::engine {

struct LoraSlot {
  std::string name;
  std::string path;                                   // PEFT directory ("" from memory)
  std::shared_ptr<const nn::LoraAdapter> adapter;     // scheduler thread (swapped between steps)
  uint64_t root = 0;                                  // prefix-cache root; never 0 (the base's)
  std::string version;
  std::string digest;  // nn::weights_digest of the adapter by value ("" unless float32 on the CPU)
  int64_t requests = 0;                               // unfinished requests under it (EngineImpl::mu_)
};
using LoraSlotPtr = std::shared_ptr<LoraSlot>;

}  // namespace rl::engine
