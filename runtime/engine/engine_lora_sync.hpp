// A LoRA adapter into an engine by the weight-sync paths that carry tensors rather than
// files (rl.weight_sync; the PEFT-directory path is Engine::load_lora_adapter and the
// in-memory one engine_weights.hpp's): shared memory from a trainer on this machine, and
// a c10d broadcast from rank 0 of a weight update group (any host). Either way the
// adapter's tensors arrive under their PEFT names and are installed under a name as
// /load_lora_adapter would (added, or replacing the adapter of that name between two
// steps). Throws rl::Error naming what is wrong. LibTorch-free header: the server calls it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.hpp"
#include "engine/engine_dist.hpp"

namespace rl::dist {
class ProcessGroup;
struct WeightMeta;
}  // namespace rl::dist

namespace rl::engine {

// What an adapter is, as peft's adapter_config.json says it: r, lora_alpha, target_modules.
struct LoraSpec {
  int64_t rank = 0;
  double alpha = 0;
  std::vector<std::string> target_modules;
};

// /init_lora_shm: a new two-buffer file in `dir` sized for an adapter of `spec` over the
// engine's model, kept for `name` (replacing one made before for it; it goes when the
// adapter is unloaded). → its layout (nn::SharedLayout as JSON, tensors under PEFT names).
nlohmann::json share_lora(Engine& engine, const std::string& name, const LoraSpec& spec,
                          const std::string& dir = "/dev/shm");

// /update_lora_from_shm: buffer `buffer` of file `id` (share_lora's for `name`) holds the
// adapter; a copy of it is installed under `name`. Unknown name or id: rl::Error.
LoraInfo update_lora_from_shm(Engine& engine, const std::string& name, const std::string& id, int buffer,
                              const std::optional<std::string>& version = {});

// /update_lora_from_distributed: every tensor of `meta` (the adapter's, PEFT names)
// received from the group's rank 0, then installed under `name` as an adapter of `spec`
// (more values announced than that adapter holds: GroupAbandoned, before receiving).
LoraInfo receive_lora(Engine& engine, dist::ProcessGroup& g, const dist::WeightMeta& meta, const std::string& name,
                      const LoraSpec& spec, const std::optional<std::string>& version, int64_t bucket_bytes = 0);

}  // namespace rl::engine
