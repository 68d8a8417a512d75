#include "engine/engine_dist.hpp"

#include "dist/dist.hpp"
#include "engine/engine_weights.hpp"

namespace rl::engine {

void receive_weights(Engine& engine, dist::ProcessGroup& g, const dist::WeightMeta& meta,
                     const std::optional<std::string>& weight_version) {
  update_weights(engine, dist::receive_weights(g, meta), weight_version);
}

}  // namespace rl::engine
