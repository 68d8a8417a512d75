#include "trainer/datum_losses.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>

namespace rl::trainer {
namespace {

struct LossSpec {
  std::string name;
  std::vector<std::string> required;  // loss_fn_inputs besides target_tokens
  std::map<std::string, double> defaults;  // config keys it reads
};

const std::vector<LossSpec>& specs() {
  static const std::vector<LossSpec> s = {
      {"cross_entropy", {"weights"}, {}},
      {"importance_sampling", {"logprobs", "advantages"}, {}},
      {"ppo", {"logprobs", "advantages"}, {{"clip_low_threshold", 0.8}, {"clip_high_threshold", 1.2}}},
      {"cispo", {"logprobs", "advantages"}, {{"clip_low_threshold", 0.8}, {"clip_high_threshold", 1.2}}},
      {"dro", {"logprobs", "advantages"}, {{"beta", 0.05}}},
  };
  return s;
}

const LossSpec& spec_of(const std::string& name) {
  for (const auto& s : specs())
    if (s.name == name) return s;
  std::string known;
  for (const auto& s : specs()) known += (known.empty() ? "" : ", ") + s.name;
  throw std::invalid_argument("loss_fn '" + name + "' is not a built-in loss (built-in: " + known +
                              "; for others use forward_backward_custom)");
}

double config_value(const LossSpec& s, const std::map<std::string, double>& config, const std::string& key) {
  auto it = config.find(key);
  return it != config.end() ? it->second : s.defaults.at(key);
}

std::string where(size_t i, const std::string& input) {
  return "data[" + std::to_string(i) + "].loss_fn_inputs['" + input + "']";
}

}  // namespace

const std::vector<std::string>& datum_loss_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& s : specs()) v.push_back(s.name);
    return v;
  }();
  return names;
}

void validate_datums(const std::string& loss_fn, const std::vector<Datum>& data,
                     const std::map<std::string, double>& config, int64_t vocab_size) {
  const LossSpec& s = spec_of(loss_fn);
  for (const auto& [key, value] : config) {
    if (!s.defaults.count(key)) {
      std::string known;
      for (const auto& [k, v] : s.defaults) known += (known.empty() ? "" : ", ") + k;
      throw std::invalid_argument("loss_fn_config key '" + key + "' is not read by " + loss_fn +
                                  (known.empty() ? " (it takes none)" : " (it takes: " + known + ")"));
    }
    if (!std::isfinite(value)) throw std::invalid_argument("loss_fn_config['" + key + "'] is not finite");
  }
  if (loss_fn == "ppo" || loss_fn == "cispo") {
    const double lo = config_value(s, config, "clip_low_threshold"), hi = config_value(s, config, "clip_high_threshold");
    if (!(lo > 0 && lo <= hi))
      throw std::invalid_argument("loss_fn_config: need 0 < clip_low_threshold <= clip_high_threshold, got " +
                                  std::to_string(lo) + " and " + std::to_string(hi));
  }
  if (data.empty()) throw std::invalid_argument("data is empty: send at least one Datum");
  for (size_t i = 0; i < data.size(); ++i) {
    const Datum& d = data[i];
    const int64_t n = static_cast<int64_t>(d.tokens.size());
    if (n == 0) throw std::invalid_argument("data[" + std::to_string(i) + "].model_input has no tokens");
    for (int64_t t : d.tokens)
      if (t < 0 || t >= vocab_size)
        throw std::invalid_argument("data[" + std::to_string(i) + "].model_input: token " + std::to_string(t) +
                                    " outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
    std::vector<std::string> needed{"target_tokens"};
    needed.insert(needed.end(), s.required.begin(), s.required.end());
    for (const auto& name : needed)
      if (!d.inputs.count(name))
        throw std::invalid_argument(where(i, name) + " is missing (" + loss_fn + " needs target_tokens" +
                                    [&] {
                                      std::string r;
                                      for (const auto& x : s.required) r += ", " + x;
                                      return r;
                                    }() +
                                    ")");
    for (const auto& [name, t] : d.inputs) {
      if (t.numel() != n || t.dim() != 1)
        throw std::invalid_argument(where(i, name) + " has shape " + c10::str(t.sizes()) + "; it must be [" +
                                    std::to_string(n) + "], one per model_input token");
    }
    const auto& tt = d.inputs.at("target_tokens");
    if (tt.scalar_type() != torch::kInt64) throw std::invalid_argument(where(i, "target_tokens") + " must be int64");
    if (n > 0) {
      const int64_t lo = tt.min().item<int64_t>(), hi = tt.max().item<int64_t>();
      if (lo < 0 || hi >= vocab_size)
        throw std::invalid_argument(where(i, "target_tokens") + " holds " + std::to_string(lo < 0 ? lo : hi) +
                                    ", outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
    }
    for (const auto& [name, t] : d.inputs)
      if (name != "target_tokens" && !torch::isfinite(t.to(torch::kFloat64)).all().item<bool>())
        throw std::invalid_argument(where(i, name) + " holds a NaN or infinity");
  }
}

DatumLoss datum_loss(const std::string& loss_fn, const std::vector<Datum>& data, const std::vector<torch::Tensor>& logp,
                     const std::map<std::string, double>& config) {
  const LossSpec& s = spec_of(loss_fn);
  if (logp.size() != data.size()) throw std::invalid_argument("datum_loss: one log-prob tensor per datum");
  DatumLoss out;
  torch::Tensor total;
  for (size_t i = 0; i < data.size(); ++i) {
    const auto& lp = logp[i];
    auto input = [&](const std::string& name) { return data[i].inputs.at(name).to(lp.device(), torch::kFloat32); };
    auto optional_weights = [&] {
      auto it = data[i].inputs.find("weights");
      return it == data[i].inputs.end() ? torch::ones_like(lp) : input("weights");
    };
    torch::Tensor per_token;  // the token's loss (differentiable)
    if (loss_fn == "cross_entropy") {
      per_token = -(input("weights") * lp);
    } else {
      const auto q = input("logprobs"), adv = input("advantages"), w = optional_weights();
      const auto ratio = torch::exp(lp - q);
      if (loss_fn == "importance_sampling") {
        per_token = -(ratio * adv);
      } else if (loss_fn == "ppo") {
        const double lo = config_value(s, config, "clip_low_threshold"), hi = config_value(s, config, "clip_high_threshold");
        per_token = -torch::min(ratio * adv, torch::clamp(ratio, lo, hi) * adv);
      } else if (loss_fn == "cispo") {
        const double lo = config_value(s, config, "clip_low_threshold"), hi = config_value(s, config, "clip_high_threshold");
        per_token = -(torch::clamp(ratio, lo, hi).detach() * lp * adv);
      } else {  // dro
        const double beta = config_value(s, config, "beta");
        per_token = -(lp * adv - 0.5 * beta * (lp - q).pow(2));
      }
      per_token = per_token * w;
    }
    out.elementwise.push_back(per_token.detach().to(torch::kCPU, torch::kFloat32));
    const auto sum = per_token.sum();
    total = total.defined() ? total + sum : sum;
  }
  out.loss = total;
  return out;
}

}  // namespace rl::trainer
