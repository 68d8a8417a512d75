// Weight sync through shared memory for an engine on the CPU (the server's
// /init_weights_shm and /update_weights_from_shm; LibTorch-free so the server
// files stay so): the engine's weights move into a two-buffer file in /dev/shm,
// a trainer on the same machine writes the buffer the engine is not reading, in
// the engine's layout, and the engine switches to it between two steps.
#pragma once
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/engine.hpp"

namespace rl::engine {

// Moves the weights into a new shared file under `dir` and returns its layout
// (nn::SharedLayout as JSON: id, path, buffer_bytes, buffers, active, tensors).
// Throws rl::Error: weights released, not a CPU engine, no room in `dir`.
nlohmann::json share_weights(Engine& engine, const std::string& dir = "/dev/shm");

// Reads buffer `buffer` of shared file `id` from now on; flushes the prefix
// cache and sets the weight version. Throws rl::Error for an unknown id (the
// weights were released or shared again) or the buffer in use.
void update_weights_from_shm(Engine& engine, const std::string& id, int buffer,
                             const std::optional<std::string>& weight_version = {});

}  // namespace rl::engine
