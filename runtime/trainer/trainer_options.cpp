// TrainerOptions from a JSON object with slime's option names (snake_case of its
// flags): every key is known or the error names it with the closest known one.
#include "trainer/trainer_options.hpp"

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string>

namespace rl::trainer {

namespace {

using nlohmann::json;

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

double num(const json& v, const std::string& key) {
  if (!v.is_number()) throw std::invalid_argument("trainer option '" + key + "': number expected, got " + v.dump());
  return v.get<double>();
}
int64_t integer(const json& v, const std::string& key) {
  const double d = num(v, key);
  if (d != static_cast<double>(static_cast<int64_t>(d)))
    throw std::invalid_argument("trainer option '" + key + "': integer expected, got " + v.dump());
  return static_cast<int64_t>(d);
}
bool boolean(const json& v, const std::string& key) {
  if (!v.is_boolean()) throw std::invalid_argument("trainer option '" + key + "': true/false expected, got " + v.dump());
  return v.get<bool>();
}
std::string str(const json& v, const std::string& key) {
  if (!v.is_string()) throw std::invalid_argument("trainer option '" + key + "': string expected, got " + v.dump());
  return v.get<std::string>();
}

}  // namespace

TrainerOptions trainer_options_from_json(const json& j) {
  TrainerOptions o;
  if (j.is_null()) return o;
  if (!j.is_object()) throw std::invalid_argument("trainer options: a JSON object expected");
  auto& l = o.loss;
  auto& op = o.optim;
  bool recompute_on = false;
  auto method = nn::Recompute::Method::uniform;
  const std::vector<std::pair<std::string, std::function<void(const json&, const std::string&)>>> setters = {
      {"advantage_estimator", [&](const json& v, const std::string& k) { l.estimator = parse_estimator(str(v, k)); }},
      {"eps_clip", [&](const json& v, const std::string& k) { l.eps_clip = num(v, k); }},
      {"eps_clip_high", [&](const json& v, const std::string& k) { l.eps_clip_high = num(v, k); }},
      {"eps_clip_c", [&](const json& v, const std::string& k) { l.eps_clip_c = num(v, k); }},
      {"entropy_coef", [&](const json& v, const std::string& k) { l.entropy_coef = num(v, k); }},
      {"use_kl_loss", [&](const json& v, const std::string& k) { l.use_kl_loss = boolean(v, k); }},
      {"kl_loss_coef", [&](const json& v, const std::string& k) { l.kl_loss_coef = num(v, k); }},
      {"kl_loss_type", [&](const json& v, const std::string& k) {
         l.kl_loss_type = parse_kl_type(str(v, k));
         o.kl_type = l.kl_loss_type;
       }},
      {"use_unbiased_kl", [&](const json& v, const std::string& k) { l.use_unbiased_kl = boolean(v, k); }},
      {"use_tis", [&](const json& v, const std::string& k) { l.use_tis = boolean(v, k); }},
      {"tis_mode", [&](const json& v, const std::string& k) {
         l.tis_mode = str(v, k);
         if (l.tis_mode != "clamp" && l.tis_mode != "icepop")
           throw std::invalid_argument("trainer option 'tis_mode': clamp or icepop expected, got '" + l.tis_mode + "'");
       }},
      {"tis_clip_low", [&](const json& v, const std::string& k) { l.tis_clip_low = num(v, k); }},
      {"tis_clip", [&](const json& v, const std::string& k) { l.tis_clip = num(v, k); }},
      {"calculate_per_token_loss", [&](const json& v, const std::string& k) {
         l.aggregation = boolean(v, k) ? Aggregation::token_mean : Aggregation::sample_mean;
       }},
      {"loss_type", [&](const json& v, const std::string& k) {
         const auto t = str(v, k);
         if (t != "policy_loss" && t != "sft_loss")
           throw std::invalid_argument("trainer option 'loss_type': policy_loss or sft_loss expected, got '" + t + "'");
         l.sft = t == "sft_loss";
       }},
      {"lr", [&](const json& v, const std::string& k) { op.lr = num(v, k); }},
      {"min_lr", [&](const json& v, const std::string& k) { op.min_lr = num(v, k); }},
      {"adam_beta1", [&](const json& v, const std::string& k) { op.beta1 = num(v, k); }},
      {"adam_beta2", [&](const json& v, const std::string& k) { op.beta2 = num(v, k); }},
      {"adam_eps", [&](const json& v, const std::string& k) { op.eps = num(v, k); }},
      {"weight_decay", [&](const json& v, const std::string& k) { op.weight_decay = num(v, k); }},
      {"lr_decay_style", [&](const json& v, const std::string& k) {
         op.schedule = str(v, k);
         if (op.schedule != "constant" && op.schedule != "linear" && op.schedule != "cosine")
           throw std::invalid_argument("trainer option 'lr_decay_style': constant, linear or cosine expected, got '" +
                                       op.schedule + "'");
       }},
      {"lr_warmup_iters", [&](const json& v, const std::string& k) { op.warmup_steps = integer(v, k); }},
      {"lr_decay_iters", [&](const json& v, const std::string& k) { op.total_steps = integer(v, k); }},
      {"clip_grad", [&](const json& v, const std::string& k) { op.clip_grad = num(v, k); }},
      {"rollout_temperature", [&](const json& v, const std::string& k) { o.temperature = num(v, k); }},
      {"use_rollout_logprobs", [&](const json& v, const std::string& k) { o.use_rollout_logprobs = boolean(v, k); }},
      {"old_logprobs", [&](const json& v, const std::string& k) {
         const auto t = str(v, k);
         if (t == "auto") o.old_logprobs = OldLogprobs::automatic;
         else if (t == "recompute") o.old_logprobs = OldLogprobs::recompute;
         else if (t == "check") o.old_logprobs = OldLogprobs::check;
         else throw std::invalid_argument("trainer option 'old_logprobs': auto, recompute or check expected, got '" + t + "'");
       }},
      {"kl_coef", [&](const json& v, const std::string& k) { o.kl_coef = num(v, k); }},
      {"gamma", [&](const json& v, const std::string& k) { o.gamma = num(v, k); }},
      {"use_opd", [&](const json& v, const std::string& k) { o.use_opd = boolean(v, k); }},
      {"opd_kl_coef", [&](const json& v, const std::string& k) { o.opd_kl_coef = num(v, k); }},
      {"normalize_advantages", [&](const json& v, const std::string& k) { o.normalize_advantages = boolean(v, k); }},
      {"use_critic", [&](const json& v, const std::string& k) { o.use_critic = boolean(v, k); }},
      {"critic_lr", [&](const json& v, const std::string& k) { o.critic_lr = num(v, k); }},
      {"value_clip", [&](const json& v, const std::string& k) { o.value_clip = num(v, k); }},
      {"lambd", [&](const json& v, const std::string& k) { o.lambd = num(v, k); }},
      {"num_critic_only_steps", [&](const json& v, const std::string& k) { o.num_critic_only_steps = integer(v, k); }},
      {"global_batch_size", [&](const json& v, const std::string& k) { o.global_batch_size = integer(v, k); }},
      {"micro_batch_size", [&](const json& v, const std::string& k) { o.micro_batch_size = integer(v, k); }},
      {"bf16", [&](const json& v, const std::string& k) { o.bf16 = boolean(v, k); }},
      {"train_backend", [&](const json& v, const std::string& k) {
         const std::string t = str(v, k);
         if (t == "fsdp") o.sharded = true;
         else if (t == "replicated") o.sharded = false;
         else throw std::invalid_argument("trainer option 'train_backend': replicated or fsdp expected, got '" + t + "'");
       }},
      // full: recompute on (uniform over groups of 1 layer unless recompute_method /
      // recompute_num_layers say otherwise); selective: nothing more than always; null: off.
      {"recompute_granularity", [&](const json& v, const std::string& k) {
         if (v.is_null()) return;
         const std::string t = str(v, k);
         if (t == "selective") {  // the attention core: recomputed in every backward pass already
           o.recompute_selective = true;
           return;
         }
         if (t != "full")
           throw std::invalid_argument("trainer option 'recompute_granularity': full or selective expected, got '" + t +
                                       "'");
         recompute_on = true;
       }},
      {"recompute_method", [&](const json& v, const std::string& k) {
         const std::string t = str(v, k);
         if (t == "uniform") method = nn::Recompute::Method::uniform;
         else if (t == "block") method = nn::Recompute::Method::block;
         else throw std::invalid_argument("trainer option 'recompute_method': uniform or block expected, got '" + t + "'");
       }},
      {"recompute_num_layers", [&](const json& v, const std::string& k) {
         o.recompute.num_layers = integer(v, k);
         if (o.recompute.num_layers < 1)
           throw std::invalid_argument("trainer option 'recompute_num_layers': >= 1 expected, got " + v.dump());
       }},
      {"fp16", [&](const json& v, const std::string& k) {
         if (boolean(v, k))
           throw std::invalid_argument("trainer option 'fp16': float16 mixed precision needs loss scaling, which is "
                                       "not implemented; use bf16 = true");
       }},
      {"max_tokens_per_gpu", [&](const json& v, const std::string& k) { o.max_tokens_per_micro_batch = integer(v, k); }},
      {"lora_rank", [&](const json& v, const std::string& k) {
         o.lora_rank = integer(v, k);
         if (o.lora_rank < 0) throw std::invalid_argument("trainer option 'lora_rank': >= 0 expected (0: off), got " + v.dump());
       }},
      {"lora_alpha", [&](const json& v, const std::string& k) { o.lora_alpha = num(v, k); }},
      {"target_modules", [&](const json& v, const std::string& k) {
         o.target_modules.clear();
         if (v.is_string()) {  // "all-linear" or slime's comma-separated list
           std::string s = v.get<std::string>(), cur;
           for (char c : s + ",") {
             if (c == ',') {
               if (!cur.empty()) o.target_modules.push_back(cur);
               cur.clear();
             } else if (c != ' ') {
               cur += c;
             }
           }
         } else if (v.is_array()) {
           for (const auto& e : v) o.target_modules.push_back(str(e, k));
         } else {
           throw std::invalid_argument("trainer option 'target_modules': a list of module names or \"all-linear\" "
                                       "expected, got " + v.dump());
         }
         lora_config(o);  // names checked here, whatever lora_rank is
       }},
  };
  for (const auto& [key, value] : j.items()) {
    auto it = std::find_if(setters.begin(), setters.end(), [&](const auto& s) { return s.first == key; });
    if (it == setters.end()) {
      std::string best;
      size_t best_d = 4;
      for (const auto& s : setters) {
        const size_t d = edit_distance(key, s.first);
        if (d < best_d) best_d = d, best = s.first;
      }
      throw std::invalid_argument("unknown trainer option '" + key + "'" +
                                  (best.empty() ? std::string() : "; did you mean '" + best + "'?"));
    }
    it->second(value, key);
  }
  o.recompute.method = recompute_on ? method : nn::Recompute::Method::none;
  if (l.eps_clip_c && *l.eps_clip_c <= 1.0)
    throw std::invalid_argument("trainer option 'eps_clip_c': must be > 1 (dual-clip bound), got " +
                                std::to_string(*l.eps_clip_c));
  if (o.loss.estimator == Estimator::reinforce_plus_plus || o.loss.estimator == Estimator::reinforce_plus_plus_baseline)
    o.normalize_advantages = j.value("normalize_advantages", true);
  return o;
}

nn::LoraConfig lora_config(const TrainerOptions& o) {
  if (o.lora_rank < 0)
    throw std::invalid_argument("trainer option 'lora_rank': >= 0 expected (0: off), got " + std::to_string(o.lora_rank));
  try {
    // The rank is checked only when LoRA is on (lora_rank 0: off, the names still checked).
    return nn::make_lora_config(o.lora_rank > 0 ? o.lora_rank : 1, o.lora_rank > 0 ? o.lora_alpha : 1.0,
                                o.target_modules);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("trainer option ") + e.what());
  }
}

json trainer_options_to_json(const TrainerOptions& o) {
  const auto& l = o.loss;
  const auto& op = o.optim;
  const auto opt = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  return json{
      {"advantage_estimator", estimator_name(l.estimator)},
      {"eps_clip", l.eps_clip},
      {"eps_clip_high", opt(l.eps_clip_high)},
      {"eps_clip_c", opt(l.eps_clip_c)},
      {"entropy_coef", l.entropy_coef},
      {"use_kl_loss", l.use_kl_loss},
      {"kl_loss_coef", l.kl_loss_coef},
      {"kl_loss_type", kl_type_name(l.kl_loss_type)},
      {"use_unbiased_kl", l.use_unbiased_kl},
      {"use_tis", l.use_tis},
      {"tis_mode", l.tis_mode},
      {"tis_clip_low", l.tis_clip_low},
      {"tis_clip", l.tis_clip},
      {"calculate_per_token_loss", l.aggregation == Aggregation::token_mean},
      {"loss_type", l.sft ? "sft_loss" : "policy_loss"},
      {"lr", op.lr},
      {"min_lr", op.min_lr},
      {"adam_beta1", op.beta1},
      {"adam_beta2", op.beta2},
      {"adam_eps", op.eps},
      {"weight_decay", op.weight_decay},
      {"lr_decay_style", op.schedule},
      {"lr_warmup_iters", op.warmup_steps},
      {"lr_decay_iters", op.total_steps},
      {"clip_grad", op.clip_grad},
      {"rollout_temperature", o.temperature},
      {"use_rollout_logprobs", o.use_rollout_logprobs},
      {"old_logprobs", o.old_logprobs == OldLogprobs::recompute ? "recompute"
                       : o.old_logprobs == OldLogprobs::check   ? "check"
                                                                : "auto"},
      {"kl_coef", o.kl_coef},
      {"gamma", o.gamma},
      {"use_opd", o.use_opd},
      {"opd_kl_coef", o.opd_kl_coef},
      {"normalize_advantages", o.normalize_advantages},
      {"use_critic", o.use_critic},
      {"critic_lr", opt(o.critic_lr)},
      {"value_clip", o.value_clip},
      {"lambd", o.lambd},
      {"num_critic_only_steps", o.num_critic_only_steps},
      {"global_batch_size", o.global_batch_size},
      {"micro_batch_size", o.micro_batch_size},
      {"bf16", o.bf16},
      {"train_backend", o.sharded ? "fsdp" : "replicated"},
      {"recompute_granularity", o.recompute.method != nn::Recompute::Method::none ? json("full")
                                : o.recompute_selective                         ? json("selective")
                                                                                : json(nullptr)},
      {"recompute_method", o.recompute.method == nn::Recompute::Method::block ? "block" : "uniform"},
      {"recompute_num_layers", o.recompute.num_layers},
      {"fp16", false},
      {"max_tokens_per_gpu", o.max_tokens_per_micro_batch},
      {"lora_rank", o.lora_rank},
      {"lora_alpha", o.lora_alpha},
      {"target_modules", o.target_modules.size() == 1 && o.target_modules[0] == "all-linear"
                             ? json("all-linear")
                             : json(o.target_modules)},
  };
}

}  // namespace rl::trainer
