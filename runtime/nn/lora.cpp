#include "nn/lora.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "nn/batch_invariant_ops.hpp"
#include "nn/weights_digest.hpp"

namespace rl::nn {
namespace {

constexpr LoraTarget kAllTargets[] = {LoraTarget::q_proj,    LoraTarget::k_proj,  LoraTarget::v_proj,
                                      LoraTarget::o_proj,    LoraTarget::gate_proj, LoraTarget::up_proj,
                                      LoraTarget::down_proj};
constexpr int kTargets = 7;

// [out, in] of a target's base projection.
std::pair<int64_t, int64_t> target_shape(const model::ModelConfig& m, LoraTarget t) {
  const int64_t H = m.hidden_size, q = m.num_attention_heads * m.head_dim, kv = m.num_key_value_heads * m.head_dim;
  switch (t) {
    case LoraTarget::q_proj: return {q, H};
    case LoraTarget::k_proj: return {kv, H};
    case LoraTarget::v_proj: return {kv, H};
    case LoraTarget::o_proj: return {H, q};
    case LoraTarget::gate_proj: return {m.intermediate_size, H};
    case LoraTarget::up_proj: return {m.intermediate_size, H};
    case LoraTarget::down_proj: return {H, m.intermediate_size};
  }
  throw std::logic_error("lora: unknown target");
}

const char* module_prefix(LoraTarget t) {
  switch (t) {
    case LoraTarget::q_proj:
    case LoraTarget::k_proj:
    case LoraTarget::v_proj:
    case LoraTarget::o_proj: return "self_attn.";
    default: return "mlp.";
  }
}

// s · B (A x) in the adapter's dtype, cast back to x's.
torch::Tensor low_rank(const torch::Tensor& x, const torch::Tensor& a, const torch::Tensor& b, double scale) {
  auto xa = x.scalar_type() == a.scalar_type() ? x : x.to(a.scalar_type());
  torch::Tensor y;
  if (bi::active(xa)) {
    y = bi::linear(bi::linear(xa, a, torch::Tensor()), b, torch::Tensor());
  } else {
    y = torch::linear(torch::linear(xa, a), b);
  }
  y = y * scale;
  return y.scalar_type() == x.scalar_type() ? y : y.to(x.scalar_type());
}

}  // namespace

const char* lora_target_name(LoraTarget t) {
  switch (t) {
    case LoraTarget::q_proj: return "q_proj";
    case LoraTarget::k_proj: return "k_proj";
    case LoraTarget::v_proj: return "v_proj";
    case LoraTarget::o_proj: return "o_proj";
    case LoraTarget::gate_proj: return "gate_proj";
    case LoraTarget::up_proj: return "up_proj";
    case LoraTarget::down_proj: return "down_proj";
  }
  return "?";
}

LoraTarget parse_lora_target(const std::string& name) {
  for (auto t : kAllTargets)
    if (name == lora_target_name(t)) return t;
  throw std::invalid_argument("LoRA target '" + name +
                              "' is not one of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj "
                              "(lm_head: LoraConfig::lm_head; \"all-linear\": all seven)");
}

void LoraConfig::validate() const {
  if (rank < 1) throw std::invalid_argument("LoRA rank (lora_rank) must be >= 1, got " + std::to_string(rank));
  if (!(alpha > 0) || !std::isfinite(alpha))
    throw std::invalid_argument("LoRA alpha (lora_alpha) must be > 0, got " + std::to_string(alpha));
  if (targets.empty() && !lm_head)
    throw std::invalid_argument("LoRA target_modules is empty: name at least one of q_proj, k_proj, v_proj, o_proj, "
                                "gate_proj, up_proj, down_proj, lm_head (or \"all-linear\")");
  for (size_t i = 0; i < targets.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (targets[i] == targets[j])
        throw std::invalid_argument(std::string("LoRA target_modules names ") + lora_target_name(targets[i]) + " twice");
}

LoraConfig make_lora_config(int64_t rank, double alpha, const std::vector<std::string>& target_modules) {
  LoraConfig c;
  c.rank = rank;
  c.alpha = alpha;
  c.targets.clear();
  auto add = [&](LoraTarget t) {
    for (auto x : c.targets)
      if (x == t) return;
    c.targets.push_back(t);
  };
  for (const auto& name : target_modules) {
    if (name == "all-linear") {
      for (auto t : kAllTargets) add(t);
    } else if (name == "lm_head") {
      c.lm_head = true;
    } else {
      try {
        add(parse_lora_target(name));
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(std::string("target_modules: ") + e.what());
      }
    }
  }
  c.validate();
  return c;
}

LoraAdapter::LoraAdapter(const model::ModelConfig& model, LoraConfig cfg, torch::TensorOptions opts)
    : model_(model), cfg_(std::move(cfg)) {
  cfg_.validate();
  const int64_t L = model_.num_hidden_layers, r = cfg_.rank;
  index_.assign(static_cast<size_t>(L), std::vector<int64_t>(kTargets, -1));
  for (int64_t i = 0; i < L; ++i) {
    const std::string p = "base_model.model.model.layers." + std::to_string(i) + ".";
    for (auto t : kAllTargets) {  // PEFT's module order within a layer, whatever the config's order
      bool on = false;
      for (auto c : cfg_.targets) on = on || c == t;
      if (!on) continue;
      const auto [out, in] = target_shape(model_, t);
      const std::string n = p + module_prefix(t) + lora_target_name(t);
      index_[static_cast<size_t>(i)][static_cast<size_t>(t)] = static_cast<int64_t>(params_.size());
      params_.emplace_back(n + ".lora_A.weight", torch::empty({r, in}, opts));
      params_.emplace_back(n + ".lora_B.weight", torch::empty({out, r}, opts));
    }
  }
  if (cfg_.lm_head) {
    lm_head_index_ = static_cast<int64_t>(params_.size());
    params_.emplace_back("base_model.model.lm_head.lora_A.weight", torch::empty({r, model_.hidden_size}, opts));
    params_.emplace_back("base_model.model.lm_head.lora_B.weight", torch::empty({model_.vocab_size, r}, opts));
  }
}

void LoraAdapter::init(uint64_t seed, bool identity) {
  torch::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  // kaiming_uniform_(a = √5) on [out, in]: bound = √(6 / ((1 + 5) · in)) = 1 / √in.
  auto kaiming = [&](const torch::Tensor& w) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(w.size(1)));
    w.copy_(torch::empty(w.sizes(), torch::kFloat32).uniform_(-bound, bound, gen));
  };
  for (size_t i = 0; i < params_.size(); i += 2) {
    kaiming(params_[i].second);
    if (identity) params_[i + 1].second.zero_();
    else kaiming(params_[i + 1].second);
  }
}

std::vector<torch::Tensor> LoraAdapter::parameters() const {
  std::vector<torch::Tensor> out;
  out.reserve(params_.size());
  for (const auto& [n, t] : params_) out.push_back(t);
  return out;
}

std::pair<torch::Tensor, torch::Tensor> LoraAdapter::get(int64_t layer, LoraTarget t) const {
  if (layer < 0 || layer >= static_cast<int64_t>(index_.size()))
    throw std::out_of_range("LoraAdapter::get: layer " + std::to_string(layer) + " of " + std::to_string(index_.size()));
  const int64_t i = index_[static_cast<size_t>(layer)][static_cast<size_t>(t)];
  if (i < 0) return {};
  return {params_[static_cast<size_t>(i)].second, params_[static_cast<size_t>(i) + 1].second};
}

std::pair<torch::Tensor, torch::Tensor> LoraAdapter::lm_head() const {
  if (lm_head_index_ < 0) return {};
  return {params_[static_cast<size_t>(lm_head_index_)].second, params_[static_cast<size_t>(lm_head_index_) + 1].second};
}

torch::Tensor LoraAdapter::delta(const torch::Tensor& x, int64_t layer, LoraTarget t) const {
  const auto [a, b] = get(layer, t);
  if (!a.defined()) return {};
  return low_rank(x, a, b, cfg_.scale());
}

torch::Tensor LoraAdapter::lm_head_delta(const torch::Tensor& x) const {
  const auto [a, b] = lm_head();
  if (!a.defined()) return {};
  return low_rank(x, a, b, cfg_.scale());
}

torch::Tensor LoraAdapter::merged_lm_head(const torch::Tensor& base) const {
  const auto [a, b] = lm_head();
  if (!a.defined()) return base;
  auto d = torch::matmul(b, a) * cfg_.scale();
  return base + (d.scalar_type() == base.scalar_type() ? d : d.to(base.scalar_type()));
}

uint64_t LoraAdapter::version() const {
  uint64_t v = 0;
  for (const auto& [n, t] : params_) v += static_cast<uint64_t>(t._version());
  return v;
}

std::vector<std::string> lora_target_modules(const LoraConfig& cfg) {
  std::vector<std::string> out;
  for (auto t : cfg.targets) out.emplace_back(lora_target_name(t));
  if (cfg.lm_head) out.emplace_back("lm_head");
  return out;
}

void copy_adapter_tensors(LoraAdapter& dst, const std::vector<std::pair<std::string, torch::Tensor>>& src) {
  std::unordered_map<std::string, const torch::Tensor*> by_name;
  for (const auto& [name, t] : src)
    if (!by_name.emplace(name, &t).second) throw std::invalid_argument("LoRA tensor '" + name + "' is given twice");
  const auto shape_text = [](torch::IntArrayRef s) {
    std::ostringstream os;
    os << s;
    return os.str();
  };
  for (const auto& [name, t] : dst.named_parameters()) {
    auto it = by_name.find(name);
    if (it == by_name.end())
      throw std::invalid_argument("LoRA tensor '" + name + "' is missing (the adapter's config targets it: r=" +
                                  std::to_string(dst.config().rank) + ")");
    if (it->second->sizes() != t.sizes())
      throw std::invalid_argument("LoRA tensor '" + name + "' has shape " + shape_text(it->second->sizes()) +
                                  ", the adapter needs " + shape_text(t.sizes()));
  }
  if (by_name.size() != dst.named_parameters().size()) {
    for (const auto& [name, t] : src) {
      bool known = false;
      for (const auto& p : dst.named_parameters()) known = known || p.first == name;
      if (!known)
        throw std::invalid_argument("LoRA tensor '" + name + "' is unexpected (not a lora_A/lora_B of the targets " +
                                    "this adapter's config names)");
    }
  }
  torch::NoGradGuard no_grad;
  for (const auto& [name, t] : dst.named_parameters()) t.copy_(*by_name.at(name));
}

std::string lora_adapter_digest(const LoraAdapter& adapter) {
  for (const auto& [n, t] : adapter.named_parameters())
    if (!t.device().is_cpu() || t.scalar_type() != torch::kFloat32) return {};
  torch::NoGradGuard no_grad;
  return weights_digest(adapter.named_parameters());
}

std::string lora_weights_digest(const std::string& base, const LoraAdapter& adapter) {
  if (base.empty()) return {};
  const std::string own = lora_adapter_digest(adapter);
  return own.empty() ? std::string() : add_digests(base, own);
}

}  // namespace rl::nn
