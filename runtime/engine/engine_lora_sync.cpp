#include "engine/engine_lora_sync.hpp"

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "base/errors.hpp"
#include "base/log_text.hpp"
#include "dist/dist.hpp"
#include "engine/engine_impl.hpp"
#include "engine/engine_weights.hpp"
#include "nn/lora.hpp"

namespace rl::engine {
namespace {

using Clock = std::chrono::steady_clock;

EngineImpl& impl_of(Engine& engine, const char* what) {
  auto* impl = dynamic_cast<EngineImpl*>(&engine);
  if (!impl) throw Error(std::string(what) + ": not an rlhost engine");
  return *impl;
}

// The adapter's config, checked before anything is allocated for it: a rank above the
// engine's --max-lora-rank or the model's hidden size (an adapter that size is larger
// than the projections it adapts) is refused.
nn::LoraConfig config_of(EngineImpl& impl, const LoraSpec& spec, const char* what) {
  nn::LoraConfig cfg;
  try {
    cfg = nn::make_lora_config(spec.rank, spec.alpha, spec.target_modules);
  } catch (const std::invalid_argument& e) {
    throw Error(std::string(what) + ": " + e.what(), "r, lora_alpha and target_modules as adapter_config.json has them");
  }
  const int64_t max_rank = impl.options().max_lora_rank;
  if (max_rank > 0 && cfg.rank > max_rank)
    throw Error(std::string(what) + ": r " + std::to_string(cfg.rank) + " is above the engine's max_lora_rank " +
                    std::to_string(max_rank),
                "restart the engine with a higher --max-lora-rank, or train a lower-rank adapter");
  if (cfg.rank > impl.config().hidden_size)
    throw Error(std::string(what) + ": r " + std::to_string(cfg.rank) + " is above the model's hidden_size " +
                std::to_string(impl.config().hidden_size));
  return cfg;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void log_received(const std::string& name, const char* how, double receive_s, const LoraInfo& info) {
  char buf[160];
  std::snprintf(buf, sizeof buf, " through %s in %.3f s (version %s)", how, receive_s, info.version.c_str());
  log::info("engine: LoRA adapter '" + name + "' received" + buf);
}

}  // namespace

nlohmann::json share_lora(Engine& engine, const std::string& name, const LoraSpec& spec, const std::string& dir) {
  const char* what = "init_lora_shm";
  EngineImpl& impl = impl_of(engine, what);
  if (name.empty()) throw Error(std::string(what) + ": lora_name is empty", "the name requests use (lora_path)");
  if (!std::filesystem::is_directory(dir))
    throw Error(std::string(what) + ": " + dir + " is not a directory", "shared-memory adapter sync needs /dev/shm");
  auto shared = std::make_shared<EngineImpl::SharedLora>();
  // The staging adapter lives on the CPU, its storages in the file: the writer fills a
  // buffer, the engine points the stage at it and copies it onto its device.
  shared->stage = std::make_shared<nn::LoraAdapter>(impl.config(), config_of(impl, spec, what), torch::kFloat32);
  shared->file = std::make_unique<nn::SharedWeights>(shared->stage->named_parameters(), dir);
  nlohmann::json out = shared->file->layout().to_json();
  impl.put_shared_lora(name, shared);
  log::info("engine: LoRA adapter '" + name + "' shared in " + shared->file->layout().path + " (2 x " +
            std::to_string((shared->file->layout().buffer_bytes + 1023) >> 10) + " KiB)");
  return out;
}

LoraInfo update_lora_from_shm(Engine& engine, const std::string& name, const std::string& id, int buffer,
                              const std::optional<std::string>& version) {
  const char* what = "update_lora_from_shm";
  EngineImpl& impl = impl_of(engine, what);
  auto shared = impl.shared_lora(name);
  if (!shared || shared->file->layout().id != id)
    throw Error(std::string(what) + ": no shared adapter file '" + id + "' for '" + name + "'" +
                    (shared ? " (the engine shared this adapter again since)" : ""),
                "POST /init_lora_shm {lora_name, r, lora_alpha, target_modules} again");
  if (buffer < 0 || buffer >= shared->file->layout().buffers)
    throw Error(std::string(what) + ": buffer " + std::to_string(buffer) + " out of range");
  const auto t0 = Clock::now();
  std::lock_guard<std::mutex> lock(shared->mu);  // one reader of the stage at a time
  shared->file->activate(buffer);
  const LoraInfo info = load_lora_adapter(engine, name, *shared->stage, version);
  log_received(name, "shared memory", seconds_since(t0), info);
  return info;
}

LoraInfo receive_lora(Engine& engine, dist::ProcessGroup& g, const dist::WeightMeta& meta, const std::string& name,
                      const LoraSpec& spec, const std::optional<std::string>& version, int64_t bucket_bytes) {
  const char* what = "update_lora_from_distributed";
  EngineImpl& impl = impl_of(engine, what);
  // The engine's own adapter, on its device: filled from the broadcast and installed as is.
  auto stage = std::make_shared<nn::LoraAdapter>(impl.config(), config_of(impl, spec, what),
                                                 impl.runner().lora_options());
  // More values announced than the adapter holds: refused before receiving (the sender's
  // broadcast then has no receiver: the group is given up).
  const int64_t announced = meta.values();
  int64_t holds = 0;
  for (const auto& [n, t] : stage->named_parameters()) holds += t.numel();
  if (announced > holds)
    throw GroupAbandoned(std::string(what) + ": adapter '" + name + "': the tensors announced hold " +
                             std::to_string(announced) + " values, an adapter of r " + std::to_string(spec.rank) +
                             " over these targets " + std::to_string(holds),
                         "send the adapter's own tensors (its r and target_modules as the trainer made it)");
  const auto t0 = Clock::now();
  // Received, whatever follows: the group stays in step with the sender.
  auto tensors = dist::receive_weights(g, meta, bucket_bytes);
  const double receive_s = seconds_since(t0);
  try {
    nn::copy_adapter_tensors(*stage, tensors);
  } catch (const std::invalid_argument& e) {
    throw Error(std::string(what) + ": adapter '" + name + "': " + e.what(),
                "send the adapter's tensors under their PEFT names, with the r and target_modules they were made with");
  }
  const LoraInfo info = impl.install_lora(name, std::move(stage), "", version);
  log_received(name, ("a c10d broadcast (" + std::to_string(meta.names.size()) + " tensors)").c_str(), receive_s, info);
  return info;
}

}  // namespace rl::engine
