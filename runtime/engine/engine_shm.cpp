#include "engine/engine_shm.hpp"

#include <filesystem>

#include "base/errors.hpp"
#include "base/log_text.hpp"
#include "engine/engine_impl.hpp"
#include "nn/batch_invariant_ops.hpp"

namespace rl::engine {
namespace {

EngineImpl& impl_of(Engine& engine, const char* what) {
  auto* impl = dynamic_cast<EngineImpl*>(&engine);
  if (!impl) throw Error(std::string(what) + ": not an rlhost engine");
  return *impl;
}

}  // namespace

nlohmann::json share_weights(Engine& engine, const std::string& dir) {
  const char* what = "init_weights_shm";
  EngineImpl& impl = impl_of(engine, what);
  if (!std::filesystem::is_directory(dir))
    throw Error(std::string(what) + ": " + dir + " is not a directory", "shared-memory weight sync needs /dev/shm");
  nlohmann::json out;
  impl.run_between_steps([&] {
    ModelRunner& r = impl.runner();
    if (!r.has_weights()) throw Error(std::string(what) + ": weights are released", "resume them first");
    const nn::SharedLayout& l = r.share_weights(dir);
    out = l.to_json();
    log::info("engine: weights shared in " + l.path + " (2 x " + std::to_string(l.buffer_bytes >> 20) + " MiB)");
  });
  return out;
}

void update_weights_from_shm(Engine& engine, const std::string& id, int buffer,
                             const std::optional<std::string>& weight_version) {
  const char* what = "update_weights_from_shm";
  EngineImpl& impl = impl_of(engine, what);
  // While sequences are being generated, the GEMM panels are packed from the written
  // buffer here, and between two steps the engine only switches buffers (a pause of
  // milliseconds instead of the whole packing). An idle engine packs in the switch: it
  // has nothing to pause, and that is faster (42M shape, 1 thread: 0.072-0.082 s a
  // sync against 0.092-0.125 s). The views keep their file mapped whatever happens
  // meanwhile; the switch checks again that these are still the shared weights `id`.
  std::vector<torch::Tensor> sources;
  if (impl.stats().num_running > 0)
    impl.run_between_steps([&] {
      if (!impl.runner().has_weights()) throw Error(std::string(what) + ": weights are released", "resume them first");
      sources = impl.runner().shared_panel_sources(id, buffer);
    });
  std::vector<nn::bi::PackedWeight> panels;
  {
    torch::NoGradGuard ng;
    for (const auto& w : sources) panels.push_back(nn::bi::pack(w));
  }
  impl.update_weights_with([&](ModelRunner& r) { r.use_shared_buffer(id, buffer, std::move(panels)); }, what,
                           weight_version);
}

}  // namespace rl::engine
