// EngineImpl's LoRA adapters: the registry by name, loads from PEFT directories and
// from memory (the colocated trainer's adapter), replacement in place between steps,
// and unloading (refused while requests use the adapter).
#include <algorithm>
#include <sstream>

#include "base/errors.hpp"
#include "base/log_text.hpp"
#include "engine/engine_impl.hpp"
#include "engine/engine_weights.hpp"
#include "nn/lora.hpp"

namespace rl::engine {

namespace fs = std::filesystem;

namespace {

void check_name(const std::string& name, const std::string& served, const char* what) {
  if (name.empty()) throw Error(std::string(what) + ": lora_name is empty", "give the adapter a name, e.g. \"math\"");
  if (name.size() > 256) throw Error(std::string(what) + ": lora_name is longer than 256 characters");
  for (unsigned char c : name)
    if (c <= ' ' || c == ':' || c == 0x7f)
      throw Error(std::string(what) + ": lora_name '" + name + "' has a space, control character or ':'",
                  "OpenAI requests name an adapter as model \"<base>:<adapter>\": use letters, digits, '-', '_', '.' or '/'");
  if (name == served)
    throw Error(std::string(what) + ": lora_name '" + name + "' is the served model's name",
                "pick another name: requests naming the model get the base model");
}

// "name=dir" or "dir" (named after its last component).
std::pair<std::string, std::string> split_lora_path(const std::string& spec) {
  const auto eq = spec.find('=');
  if (eq != std::string::npos) return {spec.substr(0, eq), spec.substr(eq + 1)};
  return {fs::path(spec).lexically_normal().filename().string(), spec};
}

}  // namespace

std::string EngineImpl::unknown_lora_hint() {
  return "load it first (POST /load_lora_adapter {\"lora_name\", \"lora_path\"}, or --lora-paths NAME=DIR at start)";
}

std::string EngineImpl::unknown_lora_message(const std::string& name) const {
  std::string loaded;
  for (const auto& [n, slot] : loras_) loaded += (loaded.empty() ? "" : ", ") + n;
  return "no LoRA adapter named '" + name + "' is loaded (loaded: " + (loaded.empty() ? "none" : loaded) + ")";
}

LoraInfo EngineImpl::lora_info(const LoraSlot& slot) const {
  LoraInfo i;
  i.name = slot.name;
  i.path = slot.path;
  i.version = slot.version;
  i.requests = slot.requests;
  if (slot.adapter) {
    const nn::LoraConfig& c = slot.adapter->config();
    i.rank = c.rank;
    i.alpha = c.alpha;
    i.targets = nn::lora_target_modules(c);
  }
  return i;
}

std::vector<LoraInfo> EngineImpl::lora_adapters() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<LoraInfo> out;
  for (const auto& [n, slot] : loras_) out.push_back(lora_info(*slot));
  return out;
}

// Scheduler thread (or the constructor, before it starts).
LoraInfo EngineImpl::install_lora_now(const std::string& name, std::shared_ptr<const nn::LoraAdapter> adapter,
                                      const std::string& path, const std::optional<std::string>& version) {
  const uint64_t root = 0x9e3779b97f4a7c15ull * (++lora_loads_) | 1;  // never 0 (the base's root)
  std::string digest = nn::lora_adapter_digest(*adapter);
  LoraSlotPtr replaced;
  LoraInfo info;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = loras_[name];
    if (!slot) {
      slot = std::make_shared<LoraSlot>();
      slot->name = name;
      slot->version = version ? *version : "1";
    } else {
      replaced = slot;
      slot->version = version ? *version : next_weight_version(slot->version);
    }
    slot->adapter = std::move(adapter);
    slot->digest = std::move(digest);
    slot->path = path;
    slot->root = root;  // what the old adapter computed is never matched again
    lora_count_.store(static_cast<int64_t>(loras_.size()));
    info = lora_info(*slot);
  }
  if (!replaced || !scheduler_) return info;
  // Requests under it go on with the new tensors: their KV from the old ones is kept
  // and never committed, or recomputed (EngineOptions::recompute_kv_on_weight_update).
  if (opts_.recompute_kv_on_weight_update) {
    scheduler_->preempt_all();
  } else {
    for (auto& s : scheduler_->running())
      if (s->lora == replaced) s->kv_mixed = true;
  }
  return info;
}

LoraInfo EngineImpl::install_lora(const std::string& name, std::shared_ptr<const nn::LoraAdapter> adapter,
                                  const std::string& path, const std::optional<std::string>& version) {
  check_name(name, opts_.served_model_name, "load_lora_adapter");
  const int64_t rank = adapter->config().rank;
  if (opts_.max_lora_rank > 0 && rank > opts_.max_lora_rank)
    throw Error("load_lora_adapter: adapter '" + name + "'" + (path.empty() ? "" : " (" + path + ")") + " has rank " +
                    std::to_string(rank) + ", above max_lora_rank " + std::to_string(opts_.max_lora_rank),
                "restart the engine with a higher --max-lora-rank, or train a lower-rank adapter");
  LoraInfo info;
  run_between_steps([&] {
    info = install_lora_now(name, adapter, path, version);
    publish_stats();
  });
  log::info("engine: LoRA adapter '" + name + "' loaded" + (path.empty() ? " from memory" : " from " + path) +
            " (rank " + std::to_string(info.rank) + ", version " + info.version + ")");
  return info;
}

namespace {

std::shared_ptr<const nn::LoraAdapter> read_adapter(const std::string& name, const fs::path& dir,
                                                    const model::ModelConfig& cfg, torch::TensorOptions opts) {
  const std::string what = "load_lora_adapter: adapter '" + name + "' at " + dir.string();
  if (!fs::is_directory(dir))
    throw Error(what + ": not a directory",
                "give a PEFT adapter directory (adapter_config.json + adapter_model.safetensors)");
  for (const char* f : {"adapter_config.json", "adapter_model.safetensors"})
    if (!fs::exists(dir / f))
      throw Error(what + ": no " + f, "a PEFT adapter directory has adapter_config.json + adapter_model.safetensors "
                                      "(peft's save_pretrained, or rlhost's trainer)");
  try {
    return nn::load_peft_adapter(dir, cfg, opts);
  } catch (const std::exception& e) {
    throw Error(what + ": " + e.what(), "is it an adapter for this model (same shapes), saved by PEFT?");
  }
}

}  // namespace

LoraInfo EngineImpl::load_lora_adapter(const std::string& name, const fs::path& dir,
                                       const std::optional<std::string>& version) {
  check_name(name, opts_.served_model_name, "load_lora_adapter");
  // Read on the calling thread: the scheduler only swaps it in.
  auto adapter = read_adapter(name, dir, runner_->config(), runner_->lora_options());
  return install_lora(name, std::move(adapter), dir.string(), version);
}

void EngineImpl::unload_lora_adapter(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = loras_.find(name);
  if (it == loras_.end())
    throw Error("unload_lora_adapter: " + unknown_lora_message(name), "GET /v1/models lists the loaded adapters");
  if (it->second->requests > 0)
    throw Error("unload_lora_adapter: adapter '" + name + "' is in use by " + std::to_string(it->second->requests) +
                    " unfinished request(s); it stays loaded",
                "retry once they finish, or abort them first (POST /abort_request)");
  loras_.erase(it);  // its cached prefixes are unreachable (their root is gone) and age out
  shared_loras_.erase(name);  // its shared-memory file, if any, goes when no update reads it
  lora_count_.store(static_cast<int64_t>(loras_.size()));
  log::info("engine: LoRA adapter '" + name + "' unloaded");
}

void EngineImpl::load_startup_loras() {
  for (const std::string& spec : opts_.lora_paths) {
    auto [name, dir] = split_lora_path(spec);
    if (dir.empty())
      throw Error("engine: lora_paths entry '" + spec + "' has no directory", "give NAME=DIR or DIR");
    check_name(name, opts_.served_model_name, ("engine: lora_paths entry '" + spec + "'").c_str());
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (loras_.count(name))
        throw Error("engine: lora_paths names the adapter '" + name + "' twice", "give each adapter its own name");
    }
    auto adapter = read_adapter(name, dir, runner_->config(), runner_->lora_options());
    if (opts_.max_lora_rank > 0 && adapter->config().rank > opts_.max_lora_rank)
      throw Error("engine: lora_paths adapter '" + name + "' has rank " + std::to_string(adapter->config().rank) +
                      ", above max_lora_rank " + std::to_string(opts_.max_lora_rank),
                  "raise --max-lora-rank");
    install_lora_now(name, std::move(adapter), dir, std::nullopt);
    log::info("engine: LoRA adapter '" + name + "' loaded from " + dir);
  }
}

std::shared_ptr<EngineImpl::SharedLora> EngineImpl::shared_lora(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = shared_loras_.find(name);
  return it == shared_loras_.end() ? nullptr : it->second;
}

void EngineImpl::put_shared_lora(const std::string& name, std::shared_ptr<SharedLora> shared) {
  std::lock_guard<std::mutex> lock(mu_);
  shared_loras_[name] = std::move(shared);
}

LoraInfo load_lora_adapter(Engine& engine, const std::string& name, const nn::LoraAdapter& src,
                           const std::optional<std::string>& version) {
  auto* impl = dynamic_cast<EngineImpl*>(&engine);
  if (!impl) throw std::invalid_argument("load_lora_adapter: not an rlhost engine");
  const model::ModelConfig& mine = impl->config();
  const model::ModelConfig& theirs = src.model_config();
  if (theirs.num_hidden_layers != mine.num_hidden_layers || theirs.hidden_size != mine.hidden_size ||
      theirs.intermediate_size != mine.intermediate_size || theirs.vocab_size != mine.vocab_size ||
      theirs.num_attention_heads != mine.num_attention_heads || theirs.num_key_value_heads != mine.num_key_value_heads ||
      theirs.head_dim != mine.head_dim) {
    std::ostringstream os;
    os << "load_lora_adapter: adapter '" << name << "' is for a model of " << theirs.num_hidden_layers
       << " layers, hidden size " << theirs.hidden_size << "; the engine's has " << mine.num_hidden_layers
       << " layers, hidden size " << mine.hidden_size;
    throw Error(os.str(), "sync an adapter made for the engine's model");
  }
  // The engine's own copy (the trainer goes on updating its adapter in place).
  torch::NoGradGuard no_grad;
  auto copy = std::make_shared<nn::LoraAdapter>(mine, src.config(), impl->runner().lora_options());
  const auto& from = src.named_parameters();
  const auto& to = copy->named_parameters();
  for (size_t i = 0; i < to.size(); ++i) to[i].second.copy_(from[i].second);
  return impl->install_lora(name, std::move(copy), "", version);
}

}  // namespace rl::engine
