// A distributed weight update into an engine in this process (SGLang's
// /update_weights_from_distributed): receives every tensor of `meta` from the
// group's rank 0 (dist::receive_weights), copying each into spare storage in the
// engine's own layout and dtype as it arrives (nn/weight_stage.hpp), then swaps it in
// between two steps, flushes the prefix cache and sets the weight version. Throws rl::Error naming a bad name,
// dtype or shape; GroupAbandoned, before receiving, when the tensors announced hold more
// values than the model. LibTorch-free header: the engine's HTTP server calls it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "base/errors.hpp"

namespace rl::dist {
class ProcessGroup;
struct WeightMeta;
}  // namespace rl::dist

namespace rl::engine {

class Engine;

// A receive refused the tensors announced before receiving any (more values than the
// engine's model, or adapter, holds): the sender's broadcast has no receiver, so the
// group cannot be used again (the server drops it).
struct GroupAbandoned : Error {
  using Error::Error;
};

// bucket_bytes: the sender's (dist::weight_buckets; 0 = a broadcast per tensor).
void receive_weights(Engine& engine, dist::ProcessGroup& g, const dist::WeightMeta& meta,
                     const std::optional<std::string>& weight_version, int64_t bucket_bytes = 0);

}  // namespace rl::engine
