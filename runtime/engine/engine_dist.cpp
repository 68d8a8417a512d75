#include "engine/engine_dist.hpp"

#include <chrono>

#include "base/log_text.hpp"
#include <cstdio>
#include "dist/dist.hpp"
#include "engine/engine.hpp"
#include "engine/engine_impl.hpp"
#include "engine/engine_weights.hpp"

namespace rl::engine {

void receive_weights(Engine& engine, dist::ProcessGroup& g, const dist::WeightMeta& meta,
                     const std::optional<std::string>& weight_version, int64_t bucket_bytes) {
  // More values announced than the model has: refused before receiving anything (a full
  // update sends each weight once); the sender's broadcast has no receiver, the group goes.
  const int64_t model_values = engine.config().num_parameters();
  const int64_t announced = meta.values();
  if (announced > model_values)
    throw GroupAbandoned("update_weights_from_distributed: the tensors announced hold " + std::to_string(announced) +
                             " values, the engine's model " + std::to_string(model_values),
                         "send this model's weights (names and shapes as its config.json makes them)");
  // Each tensor goes into spare storage in the engine's layout as it arrives, while
  // the next ones are on their way and the engine goes on generating; between two
  // steps the spare memory is swapped in. Without a stage (weights in shared memory,
  // or names the model lacks: update_weights says which, once all is received) the
  // tensors are received whole, then copied in between two steps.
  auto* impl = dynamic_cast<EngineImpl*>(&engine);
  std::unique_ptr<nn::WeightStage> stage;
  if (impl) {
    try {
      stage = impl->plan_weight_stage(meta.names, meta.shapes);
    } catch (const Error&) {
      stage.reset();
    }
  }
  using clock = std::chrono::steady_clock;
  auto secs = [](clock::time_point a, clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  char buf[320];
  const auto t0 = clock::now();
  if (stage) {
    stage->copy_uncovered();
    // A tensor whose spare view is in the sent dtype and layout (the rows layout:
    // nn/transformer.hpp) is received straight into it.
    dist::receive_weights(g, meta, bucket_bytes, [&](size_t k, const at::Tensor& t) { stage->put(k, t); },
                          [&](size_t k) { return stage->target(k); });
    const auto t1 = clock::now();
    stage->pack_panels();  // what no put() packed: here, while the engine generates, not between two steps
    const auto t2 = clock::now();
    impl->install_weight_stage(*stage, weight_version);
    std::snprintf(buf, sizeof buf,
                  "engine: weights received in %.3f s (staged as they came, %zu of %zu in place, %.1f MB the update "
                  "does not cover copied first; GEMM panels packed as each matrix completed, the rest in %.3f s), "
                  "installed in %.3f s",
                  secs(t0, t1), stage->in_place(), stage->size(), stage->uncovered_bytes() / 1e6,
                  secs(t1, t2), secs(t2, clock::now()));
  } else {
    auto tensors = dist::receive_weights(g, meta, bucket_bytes);
    const auto t1 = clock::now();
    update_weights(engine, tensors, weight_version);
    std::snprintf(buf, sizeof buf, "engine: weights received in %.3f s, installed in %.3f s", secs(t0, t1),
                  secs(t1, clock::now()));
  }
  log::info(buf);
}

}  // namespace rl::engine
