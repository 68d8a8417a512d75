// PEFT's adapter directory: adapter_config.json + adapter_model.safetensors.
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "model/tensor_files.hpp"
#include "nn/lora.hpp"
#include "nn/weights.hpp"

namespace rl::nn {
namespace {

nlohmann::json number(double v) {
  if (std::floor(v) == v && std::fabs(v) < 1e15) return static_cast<int64_t>(v);
  return v;
}

[[noreturn]] void refuse(const std::filesystem::path& file, const std::string& field, const std::string& why) {
  throw std::runtime_error(file.string() + ": " + field + ": " + why);
}

}  // namespace

void save_peft_adapter(const LoraAdapter& adapter, const std::filesystem::path& dir, const std::string& base_model) {
  const auto& cfg = adapter.config();
  const nlohmann::json targets = lora_target_modules(cfg);
  nlohmann::json j = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"base_model_name_or_path", base_model},
      {"r", cfg.rank},
      {"lora_alpha", number(cfg.alpha)},
      {"target_modules", targets},
      {"lora_dropout", 0.0},
      {"bias", "none"},
      {"fan_in_fan_out", false},
      {"use_rslora", false},
      {"use_dora", false},
      {"init_lora_weights", true},
      {"inference_mode", true},
      {"modules_to_save", nullptr},
      {"layers_to_transform", nullptr},
      {"layers_pattern", nullptr},
      {"rank_pattern", nlohmann::json::object()},
      {"alpha_pattern", nlohmann::json::object()},
      {"revision", nullptr},
  };
  std::filesystem::create_directories(dir);
  // float32, contiguous, on the CPU: the bytes the file holds, kept alive while writing.
  std::vector<torch::Tensor> host;
  std::vector<model::TensorToWrite> out;
  for (const auto& [name, t] : adapter.named_parameters()) {
    host.push_back(t.detach().to(torch::kCPU, torch::kFloat32).contiguous());
    const auto& h = host.back();
    out.push_back({name, model::DType::F32, h.sizes().vec(), h.data_ptr(), static_cast<size_t>(h.nbytes())});
  }
  model::write_safetensors(dir / "adapter_model.safetensors", out, {{"format", "pt"}});
  model::write_file_atomic(dir / "adapter_config.json", j.dump(2) + "\n");
}

std::shared_ptr<LoraAdapter> load_peft_adapter(const std::filesystem::path& dir, const model::ModelConfig& model,
                                               torch::TensorOptions opts) {
  const auto cfg_file = dir / "adapter_config.json";
  std::ifstream in(cfg_file);
  if (!in) throw std::runtime_error(cfg_file.string() + ": cannot read (a PEFT adapter directory holds "
                                    "adapter_config.json and adapter_model.safetensors)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw std::runtime_error(cfg_file.string() + ": not JSON: " + e.what());
  }
  if (!j.is_object()) refuse(cfg_file, "(top level)", "expected a JSON object");
  auto field = [&](const char* k) -> const nlohmann::json* {
    auto it = j.find(k);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  };
  auto flag = [&](const char* k) {
    const auto* v = field(k);
    if (v && !v->is_boolean()) refuse(cfg_file, k, "expected true or false");
    return v && v->get<bool>();
  };
  const auto* type = field("peft_type");
  if (!type || !type->is_string() || type->get<std::string>() != "LORA")
    refuse(cfg_file, "peft_type", std::string("rlhost loads LoRA adapters only (peft_type \"LORA\"), got ") +
                                      (type ? type->dump() : "nothing"));
  if (flag("use_dora")) refuse(cfg_file, "use_dora", "DoRA adapters are not supported (plain LoRA only)");
  if (flag("use_rslora")) refuse(cfg_file, "use_rslora", "rank-stabilised LoRA (alpha / sqrt(r)) is not supported");
  if (flag("fan_in_fan_out")) refuse(cfg_file, "fan_in_fan_out", "transposed (Conv1D) adapters are not supported");
  if (flag("lora_bias")) refuse(cfg_file, "lora_bias", "adapters with a bias on lora_B are not supported");
  if (const auto* b = field("bias"); b && (!b->is_string() || b->get<std::string>() != "none"))
    refuse(cfg_file, "bias", "only \"none\" is supported, got " + b->dump());
  for (const char* k : {"rank_pattern", "alpha_pattern"})
    if (const auto* v = field(k); v && !v->empty())
      refuse(cfg_file, k, "per-module ranks or alphas are not supported, got " + v->dump());
  for (const char* k : {"modules_to_save", "layers_to_transform", "layer_replication", "trainable_token_indices"})
    if (const auto* v = field(k); v && !(v->is_array() && v->empty()))
      refuse(cfg_file, k, "not supported (every layer adapted, nothing else saved), got " + v->dump());
  const auto* r = field("r");
  if (!r || !r->is_number_integer()) refuse(cfg_file, "r", "expected the rank, an integer");
  const auto* alpha = field("lora_alpha");
  if (!alpha || !alpha->is_number()) refuse(cfg_file, "lora_alpha", "expected a number");

  LoraConfig cfg;
  cfg.rank = r->get<int64_t>();
  cfg.alpha = alpha->get<double>();
  cfg.targets.clear();
  const auto* tm = field("target_modules");
  std::vector<std::string> names;
  if (tm && tm->is_string() && tm->get<std::string>() == "all-linear") {
    for (const char* n : {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}) names.push_back(n);
  } else if (tm && tm->is_array()) {
    for (const auto& v : *tm) {
      if (!v.is_string()) refuse(cfg_file, "target_modules", "expected module names, got " + v.dump());
      names.push_back(v.get<std::string>());
    }
  } else {
    refuse(cfg_file, "target_modules",
           "expected a list of module names or \"all-linear\" (regular expressions are not supported), got " +
               (tm ? tm->dump() : std::string("nothing")));
  }
  std::set<std::string> seen;
  for (const auto& n : names) {
    if (!seen.insert(n).second) continue;
    if (n == "lm_head") {
      cfg.lm_head = true;
      continue;
    }
    try {
      cfg.targets.push_back(parse_lora_target(n));
    } catch (const std::invalid_argument& e) {
      refuse(cfg_file, "target_modules", e.what());
    }
  }
  try {
    cfg.validate();
  } catch (const std::invalid_argument& e) {
    refuse(cfg_file, "r / lora_alpha / target_modules", e.what());
  }

  const auto file = dir / "adapter_model.safetensors";
  if (!std::filesystem::exists(file))
    throw std::runtime_error(file.string() + ": missing (rlhost reads safetensors adapters only; "
                             "save with peft's save_pretrained(safe_serialization=True))");
  auto set = model::read_safetensors(file);
  auto adapter = std::make_shared<LoraAdapter>(model, cfg, opts);
  torch::NoGradGuard no_grad;
  std::set<std::string> expected;
  for (const auto& [name, t] : adapter->named_parameters()) {
    expected.insert(name);
    const auto* v = set.find(name);
    if (!v) refuse(file, name, "missing (the config targets it; is the adapter for another model shape?)");
    if (v->shape != t.sizes().vec()) {
      std::ostringstream s;
      s << "shape " << torch::IntArrayRef(v->shape) << " but this model with r=" << cfg.rank << " needs "
        << t.sizes();
      refuse(file, name, s.str());
    }
    t.copy_(tensor_from_view(*v));
  }
  for (const auto& v : set.tensors)
    if (!expected.count(v.name))
      refuse(file, v.name, "unexpected tensor (not a lora_A/lora_B of the configured target_modules over " +
                               std::to_string(model.num_hidden_layers) + " layers)");
  return adapter;
}

}  // namespace rl::nn
