// Every loss path of runtime/trainer against tests/e2e/loss_reference.py, a plain
// PyTorch (float64) implementation of slime's formulas: loss, each metric, and the
// gradients with respect to logp and entropy, to 1e-5 in float32. The cases are
// deterministic random batches (written once to a temp dir; python3 runs once for
// all of them). A tiny Llama adds a model-level check of parameter gradients against
// transformers. Without torch (or, for that case, transformers) in python3 the cases
// are skipped (rl::test::skip: ctest shows `cpp_torch/python/*` as Skipped) naming what
// to install, and under CI=true they fail; they never pass silently. Tagged [python]:
// tests/CMakeLists.txt runs them as their own ctest entries.
#include <torch/torch.h>

#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../skip.hpp"
#include "nn/transformer.hpp"
#include "trainer/losses.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace rl::trainer;

namespace {

constexpr double kTol = 1e-5;
using Tensors = std::map<std::string, torch::Tensor>;

struct Case {
  Case(std::string n, std::string k, json o = json::object(), Tensors in = {})
      : name(std::move(n)), kind(std::move(k)), options(std::move(o)), inputs(std::move(in)) {}
  std::string name, kind;
  json options;
  Tensors inputs;
  std::shared_ptr<rl::nn::Transformer> model;  // kind "model"
};

json to_json(const torch::Tensor& t) {
  auto c = t.detach().to(torch::kCPU, torch::kFloat64).contiguous();
  std::vector<double> data(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
  return {{"shape", c.sizes().vec()}, {"data", data}};
}

torch::Tensor from_json(const json& j) {
  auto data = j.at("data").get<std::vector<double>>();
  return torch::tensor(data, torch::kFloat64).reshape(j.at("shape").get<std::vector<int64_t>>());
}

// ---- random batches ------------------------------------------------------------------
// Right-padded loss masks with a few holes inside the response (multi-turn tool
// output), optionally one fully masked row.
torch::Tensor random_mask(int64_t B, int64_t T, bool with_empty_row) {
  auto lens = torch::randint(1, T + 1, {B, 1});
  auto mask = (torch::arange(T).unsqueeze(0) < lens).to(torch::kFloat32);
  mask = mask * (torch::rand({B, T}) > 0.15).to(torch::kFloat32);
  mask.select(1, 0).fill_(1);  // every row keeps at least one token...
  if (with_empty_row) mask[B - 1].zero_();  // ...except this one
  return mask;
}

Tensors random_batch(uint64_t seed, int64_t B, int64_t T, bool with_empty_row = false) {
  torch::manual_seed(seed);
  Tensors in;
  in["mask"] = random_mask(B, T, with_empty_row);
  in["logp"] = -(torch::rand({B, T}) * 3 + 0.01);
  // Spread of 0.15 puts ratios on both sides of a 0.2 clip.
  in["old_logp"] = in["logp"] + torch::randn({B, T}) * 0.15;
  in["advantages"] = torch::randn({B, T});
  in["entropy"] = torch::rand({B, T}) * 2;
  in["ref_logp"] = in["logp"] + torch::randn({B, T}) * 0.3;
  in["rollout_logp"] = in["old_logp"] + torch::randn({B, T}) * 0.5;
  return in;
}

json loss_options(const std::string& estimator) {
  return {{"estimator", estimator}, {"eps_clip", 0.2},     {"eps_clip_high", nullptr}, {"eps_clip_c", nullptr},
          {"entropy_coef", 0.0},    {"use_kl_loss", false}, {"kl_loss_coef", 0.0},      {"kl_loss_type", "k1"},
          {"use_unbiased_kl", false}, {"use_tis", false},  {"tis_mode", "clamp"},      {"tis_clip_low", 0.0},
          {"tis_clip", 2.0},        {"aggregation", "sample_mean"}, {"sft", false},    {"divisor", 0.0}};
}

LossOptions parse_loss_options(const json& j) {
  LossOptions o;
  o.estimator = parse_estimator(j["estimator"].get<std::string>());
  o.eps_clip = j["eps_clip"];
  if (!j["eps_clip_high"].is_null()) o.eps_clip_high = j["eps_clip_high"].get<double>();
  if (!j["eps_clip_c"].is_null()) o.eps_clip_c = j["eps_clip_c"].get<double>();
  o.entropy_coef = j["entropy_coef"];
  o.use_kl_loss = j["use_kl_loss"];
  o.kl_loss_coef = j["kl_loss_coef"];
  o.kl_loss_type = parse_kl_type(j["kl_loss_type"].get<std::string>());
  o.use_unbiased_kl = j["use_unbiased_kl"];
  o.use_tis = j["use_tis"];
  o.tis_mode = j["tis_mode"].get<std::string>();
  o.tis_clip_low = j["tis_clip_low"];
  o.tis_clip = j["tis_clip"];
  o.aggregation = parse_aggregation(j["aggregation"].get<std::string>());
  o.sft = j["sft"];
  return o;
}

// A loss case: the batch minus the inputs the options do not use (so the reference
// also sees which metrics apply), plus overrides.
Case loss_case(const std::string& name, uint64_t seed, json opts, std::vector<std::string> drop = {},
               bool with_empty_row = false, int64_t B = 4, int64_t T = 9) {
  Case c{name, "loss", std::move(opts), random_batch(seed, B, T, with_empty_row)};
  for (auto& d : drop) c.inputs.erase(d);
  return c;
}

std::vector<Case> build_cases() {
  std::vector<Case> cases;
  // KL estimators: log-ratios wide enough (σ = 2) for low_var_kl's clamp to bite.
  for (std::string type : {"k1", "k2", "k3", "low_var_kl"})
    for (bool ratio : {false, true}) {
      torch::manual_seed(11);
      Case c{"kl/" + type + (ratio ? "/ratio" : ""), "kl", {{"type", type}}};
      c.inputs["logp"] = -torch::rand({3, 7}) * 2;
      c.inputs["logp_base"] = c.inputs["logp"] + torch::randn({3, 7}) * 2;
      if (ratio) c.inputs["importance_ratio"] = torch::exp(torch::randn({3, 7}) * 0.5);
      cases.push_back(std::move(c));
    }
  // Advantage estimators.
  struct Adv { std::string est; double kl_coef, gamma; bool normalize; };
  for (auto a : std::vector<Adv>{{"grpo", 0, 1, false}, {"gspo", 0.1, 1, false}, {"cispo", 0, 1, false},
                                 {"grpo", 0, 1, true}, {"reinforce_plus_plus", 0.1, 1, true},
                                 {"reinforce_plus_plus", 0.05, 0.9, true},
                                 {"reinforce_plus_plus_baseline", 0.1, 1, true}}) {
    torch::manual_seed(21);
    std::ostringstream name;
    name << "advantages/" << a.est << "/kl" << a.kl_coef << "/gamma" << a.gamma << (a.normalize ? "/norm" : "");
    Case c{name.str(), "advantages",
           {{"estimator", a.est}, {"kl_coef", a.kl_coef}, {"gamma", a.gamma}, {"normalize", a.normalize}}};
    c.inputs["mask"] = random_mask(4, 8, /*with_empty_row=*/true);
    c.inputs["rewards"] = torch::randn({4});
    c.inputs["kl"] = torch::randn({4, 8}) * 0.2;
    cases.push_back(std::move(c));
  }
  // ppo: GAE over the critic's values. Responses of different lengths (values past
  // them are garbage the GAE must ignore), holes in the loss mask, one fully masked row.
  struct Gae { double kl_coef, gamma, lambd; bool normalize; };
  for (auto g : std::vector<Gae>{{0, 1, 1, false}, {0, 1, 0.95, false}, {0.1, 0.99, 0.95, false},
                                 {0.05, 1, 0.9, true}, {0, 0.9, 0, false}}) {
    torch::manual_seed(23);
    std::ostringstream name;
    name << "advantages/ppo/kl" << g.kl_coef << "/gamma" << g.gamma << "/lambd" << g.lambd << (g.normalize ? "/norm" : "");
    Case c{name.str(), "advantages",
           {{"estimator", "ppo"}, {"kl_coef", g.kl_coef}, {"gamma", g.gamma}, {"lambd", g.lambd},
            {"normalize", g.normalize}}};
    const auto lens = torch::tensor({8, 5, 1, 6}, torch::kInt64);
    auto mask = (torch::arange(8).unsqueeze(0) < lens.unsqueeze(1)).to(torch::kFloat32);
    mask = mask * (torch::rand({4, 8}) > 0.2).to(torch::kFloat32);
    mask.select(1, 0).fill_(1);
    mask[3].zero_();  // a removed sample: its loss mask is all zero, its response is not
    mask[1][4] = 0;   // a response ending outside the loss mask: its reward still lands on its last token
    c.inputs["mask"] = mask;
    c.inputs["rewards"] = torch::randn({4});
    c.inputs["kl"] = torch::randn({4, 8}) * 0.2;
    c.inputs["values"] = torch::randn({4, 8}) + torch::where(mask.ne(0), torch::zeros({}), torch::full({}, 5.0f));
    c.inputs["response_lengths"] = lens.to(torch::kFloat32);
    cases.push_back(std::move(c));
  }
  // The critic's clipped value loss, V near V_old on both sides of the clip.
  for (std::string agg : {"sample_mean", "token_mean"})
    for (double divisor : {0.0, 12.0})
      for (double clip : {0.2, 0.05}) {
        torch::manual_seed(24);
        std::ostringstream name;
        name << "value_loss/" << agg << "/div" << divisor << "/clip" << clip;
        Case c{name.str(), "value_loss", {{"aggregation", agg}, {"divisor", divisor}, {"value_clip", clip}}};
        c.inputs["mask"] = random_mask(4, 7, /*with_empty_row=*/true);
        c.inputs["old_values"] = torch::randn({4, 7});
        c.inputs["values"] = c.inputs["old_values"] + torch::randn({4, 7}) * 0.3;
        c.inputs["returns"] = torch::randn({4, 7});
        cases.push_back(std::move(c));
      }
  {
    torch::manual_seed(22);
    Case c{"whiten", "whiten"};
    c.inputs["mask"] = random_mask(3, 10, false);
    c.inputs["a"] = torch::randn({3, 10}) * 3 + 5;
    cases.push_back(std::move(c));
  }
  // Aggregation, with per-sample denominators (fan-out rollouts) and divisors.
  for (std::string agg : {"sample_mean", "token_mean"})
    for (double divisor : {0.0, 16.0})
      for (bool denoms : {false, true}) {
        if (agg == "token_mean" && denoms) continue;  // sample_denoms only shape sample_mean
        torch::manual_seed(31);
        Case c{"reduce/" + agg + "/div" + std::to_string(int(divisor)) + (denoms ? "/denoms" : ""), "reduce",
               {{"aggregation", agg}, {"divisor", divisor}}};
        c.inputs["mask"] = random_mask(4, 6, true);
        c.inputs["x"] = torch::randn({4, 6});
        if (denoms) c.inputs["sample_denoms"] = torch::tensor({9.0f, 9.0f, 4.0f, 0.0f});
        cases.push_back(std::move(c));
      }
  // Policy losses.
  const std::vector<std::string> no_extras = {"entropy", "ref_logp", "rollout_logp"};
  for (std::string est : {"grpo", "gspo", "cispo", "reinforce_plus_plus", "reinforce_plus_plus_baseline"}) {
    auto o = loss_options(est);
    if (est == "cispo") o["eps_clip"] = 0.3, o["eps_clip_high"] = 0.5;
    cases.push_back(loss_case("loss/" + est, 41, o, no_extras, /*with_empty_row=*/true));
  }
  {
    auto o = loss_options("grpo");
    o["eps_clip_high"] = 0.28;
    o["eps_clip_c"] = 3.0;
    // Wider ratio spread so the dual clip's cap (3·|A|) is reached.
    auto c = loss_case("loss/grpo/dual_clip", 42, o, no_extras);
    c.inputs["old_logp"] = c.inputs["logp"] + torch::randn({4, 9}) * 1.5;
    cases.push_back(std::move(c));
  }
  {
    auto o = loss_options("gspo");
    o["eps_clip_c"] = 3.0;
    cases.push_back(loss_case("loss/gspo/dual_clip", 43, o, no_extras));
  }
  for (std::string type : {"k1", "k2", "k3", "low_var_kl"})
    for (bool unbiased : {false, true}) {
      auto o = loss_options("grpo");
      o["use_kl_loss"] = true, o["kl_loss_coef"] = 0.05, o["kl_loss_type"] = type, o["use_unbiased_kl"] = unbiased;
      cases.push_back(loss_case("loss/kl_loss/" + type + (unbiased ? "/unbiased" : ""), 44, o,
                                {"entropy", "rollout_logp"}));
    }
  {
    auto o = loss_options("grpo");
    o["entropy_coef"] = 0.01;
    cases.push_back(loss_case("loss/entropy", 45, o, {"ref_logp", "rollout_logp"}));
    o["entropy_coef"] = 0.0;  // entropy given but unweighted: reported, no gradient
    cases.push_back(loss_case("loss/entropy/zero_coef", 45, o, {"ref_logp", "rollout_logp"}));
  }
  for (std::string mode : {"clamp", "icepop"}) {
    for (std::string est : {"grpo", "cispo"}) {
      auto o = loss_options(est);
      o["use_tis"] = true, o["tis_mode"] = mode;
      if (mode == "icepop") o["tis_clip_low"] = 0.5, o["tis_clip"] = 1.5;
      cases.push_back(loss_case("loss/tis/" + mode + "/" + est, 46, o, {"entropy", "ref_logp"}, true));
    }
  }
  // rollout_logp without TIS: only train_rollout_logprob_abs_diff.
  cases.push_back(loss_case("loss/rollout_abs_diff", 47, loss_options("grpo"), {"entropy", "ref_logp"}));
  // On-policy first step: no old_logp (ratio 1 everywhere).
  cases.push_back(loss_case("loss/no_old_logp", 48, loss_options("grpo"),
                            {"old_logp", "entropy", "ref_logp", "rollout_logp"}));
  // Everything at once, under each aggregation, with and without a divisor.
  for (std::string agg : {"sample_mean", "token_mean"})
    for (double divisor : {0.0, 12.0, 40.0}) {
      auto o = loss_options("gspo");
      o["aggregation"] = agg, o["divisor"] = divisor, o["eps_clip_high"] = 0.28;
      o["entropy_coef"] = 0.02, o["use_kl_loss"] = true, o["kl_loss_coef"] = 0.1, o["kl_loss_type"] = "low_var_kl";
      o["use_tis"] = true;
      auto c = loss_case("loss/all/" + agg + "/div" + std::to_string(int(divisor)), 49, o, {}, true);
      cases.push_back(std::move(c));
    }
  {
    auto o = loss_options("grpo");
    auto c = loss_case("loss/sample_denoms", 50, o, no_extras, true);
    c.inputs["sample_denoms"] = torch::tensor({12.0f, 12.0f, 5.0f, 0.0f});
    cases.push_back(std::move(c));
  }
  for (std::string agg : {"sample_mean", "token_mean"}) {
    auto o = loss_options("grpo");
    o["sft"] = true, o["aggregation"] = agg;
    cases.push_back(loss_case("loss/sft/" + agg, 51, o, {"old_logp", "advantages", "entropy", "ref_logp",
                                                          "rollout_logp"}, true));
  }
  return cases;
}

// ---- the tiny model ----------------------------------------------------------------------
const std::vector<std::string> kModelParams = {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                                               "model.layers.1.mlp.down_proj.weight", "model.norm.weight",
                                               "lm_head.weight"};

Case model_case(const fs::path& dir) {
  json cfg = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"vocab_size", 300},
              {"hidden_size", 32}, {"intermediate_size", 64}, {"num_hidden_layers", 2},
              {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"max_position_embeddings", 64},
              {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0}, {"initializer_range", 0.2},
              {"tie_word_embeddings", false}, {"torch_dtype", "float32"}};
  Case c{"model/grpo", "model", loss_options("grpo")};
  c.model = std::make_shared<rl::nn::Transformer>(rl::model::ModelConfig::from_json(cfg, "tiny llama"));
  c.model->init_random(13);
  c.model->save(dir);
  c.options["model_dir"] = dir.string();
  c.options["temperature"] = 0.8;
  c.options["params"] = kModelParams;
  c.options["eps_clip_high"] = 0.28, c.options["entropy_coef"] = 0.01;
  c.options["use_kl_loss"] = true, c.options["kl_loss_coef"] = 0.05, c.options["kl_loss_type"] = "k3";
  torch::manual_seed(61);
  const int64_t B = 2, T = 12;
  c.inputs["input_ids"] = torch::randint(0, 300, {B, T});
  auto mask = torch::zeros({B, T - 1});
  mask.narrow(1, 3, 8).fill_(1);  // prompt of 4 tokens, then the response...
  mask[1].narrow(0, 8, 3).zero_();  // ...padded in the second row
  c.inputs["mask"] = mask;
  torch::NoGradGuard no_grad;
  auto lp = c.model->sequence_logprobs(c.inputs["input_ids"], 0.8).logprobs;
  c.inputs["old_logp"] = lp + torch::randn({B, T - 1}) * 0.2;
  c.inputs["ref_logp"] = lp + torch::randn({B, T - 1}) * 0.3;
  c.inputs["advantages"] = torch::tensor({1.0f, -0.7f}).unsqueeze(1).expand({B, T - 1}).contiguous();
  return c;
}

// ---- rlhost's side -------------------------------------------------------------------
Tensors run_loss(const LossOptions& o, double divisor, const Tensors& in, torch::Tensor logp, torch::Tensor entropy) {
  LossInputs li;
  li.logp = logp;
  li.entropy = entropy;
  li.mask = in.at("mask");
  auto get = [&](const char* k) { return in.count(k) ? in.at(k) : torch::Tensor(); };
  li.old_logp = get("old_logp"), li.advantages = get("advantages"), li.ref_logp = get("ref_logp");
  li.rollout_logp = get("rollout_logp"), li.sample_denoms = get("sample_denoms");
  li.divisor = divisor;
  auto r = policy_loss(o, li);
  r.loss.backward();
  Tensors out{{"loss", r.loss}};
  for (auto& [k, v] : r.metrics) out["metric/" + k] = v;
  return out;
}

Tensors run_cpp(const Case& c) {
  const auto& in = c.inputs;
  if (c.kind == "kl") {
    auto ratio = in.count("importance_ratio") ? in.at("importance_ratio") : torch::Tensor();
    return {{"kl", approx_kl(in.at("logp"), in.at("logp_base"), parse_kl_type(c.options["type"].get<std::string>()), ratio)}};
  }
  if (c.kind == "advantages") {
    AdvantageInputs a;
    a.rewards = in.at("rewards"), a.mask = in.at("mask"), a.kl = in.at("kl");
    a.kl_coef = c.options["kl_coef"].get<double>(), a.gamma = c.options["gamma"].get<double>();
    a.normalize = c.options["normalize"].get<bool>();
    if (in.count("values")) {
      a.values = in.at("values");
      a.response_lengths = in.at("response_lengths").to(torch::kInt64);
      a.lambd = c.options["lambd"].get<double>();
    }
    auto [adv, ret] = compute_advantages(parse_estimator(c.options["estimator"].get<std::string>()), a);
    return {{"advantages", adv}, {"returns", ret}};
  }
  if (c.kind == "whiten") return {{"whiten", whiten(in.at("a"), in.at("mask"))}};
  if (c.kind == "reduce") {
    auto x = in.at("x").clone().requires_grad_(true);
    auto y = reduce(x, in.at("mask"), parse_aggregation(c.options["aggregation"].get<std::string>()),
                    in.count("sample_denoms") ? in.at("sample_denoms") : torch::Tensor(), c.options["divisor"].get<double>());
    y.backward();
    return {{"reduce", y}, {"grad/x", x.grad()}};
  }
  if (c.kind == "value_loss") {
    ValueLossInputs vi;
    auto values = in.at("values").clone().requires_grad_(true);
    vi.values = values, vi.old_values = in.at("old_values"), vi.returns = in.at("returns"), vi.mask = in.at("mask");
    vi.divisor = c.options["divisor"].get<double>();
    auto r = value_loss(c.options["value_clip"].get<double>(),
                        parse_aggregation(c.options["aggregation"].get<std::string>()), vi);
    r.loss.backward();
    Tensors out{{"loss", r.loss}, {"grad/values", values.grad()}};
    for (auto& [k, v] : r.metrics) out["metric/" + k] = v;
    return out;
  }
  const auto opts = parse_loss_options(c.options);
  if (c.kind == "loss") {
    auto logp = in.at("logp").clone().requires_grad_(true);
    auto entropy = in.count("entropy") ? in.at("entropy").clone().requires_grad_(true) : torch::Tensor();
    auto out = run_loss(opts, c.options["divisor"].get<double>(), in, logp, entropy);
    out["grad/logp"] = logp.grad().defined() ? logp.grad() : torch::zeros_like(logp);
    if (entropy.defined()) out["grad/entropy"] = entropy.grad().defined() ? entropy.grad() : torch::zeros_like(entropy);
    return out;
  }
  // model: logp and entropy through the chunked lm_head, gradients into the weights.
  auto& m = *c.model;
  m.set_requires_grad(true);
  for (auto& [name, p] : m.named_parameters()) p.mutable_grad() = torch::Tensor();
  auto tl = m.sequence_logprobs(in.at("input_ids"), c.options["temperature"].get<double>(), /*with_entropy=*/true);
  auto out = run_loss(opts, 0.0, in, tl.logprobs, tl.entropy);
  out["logp"] = tl.logprobs;
  out["entropy"] = tl.entropy;
  for (const std::string& p : kModelParams) out["grad/" + p] = m.parameter(p).grad();
  m.set_requires_grad(false);
  return out;
}

// ---- the reference run -----------------------------------------------------------------
struct Reference {
  std::vector<Case> cases;
  json results, skipped;
  std::string skip_all;  // non-empty: python3 or its torch is unavailable
};

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

Reference& reference() {
  static Reference ref = [] {
    Reference r;
    char tmpl[] = "/tmp/rlhost_loss_parity_XXXXXX";
    const fs::path dir = mkdtemp(tmpl);
    r.cases = build_cases();
    r.cases.push_back(model_case(dir / "tiny_llama"));
    json cases = json::array();
    for (auto& c : r.cases) {
      json inputs = json::object();
      for (auto& [k, v] : c.inputs) inputs[k] = to_json(v);
      cases.push_back({{"name", c.name}, {"kind", c.kind}, {"options", c.options}, {"inputs", inputs}});
    }
    std::ofstream(dir / "cases.json") << json{{"cases", cases}}.dump();
    const char* py = std::getenv("RLHOST_PYTHON");
    const std::string python = py && *py ? py : "python3";
    const std::string script = std::string(RLHOST_TEST_SOURCE_DIR) + "/tests/e2e/loss_reference.py";
    const std::string cmd = python + " '" + script + "' '" + (dir / "cases.json").string() + "' '" +
                            (dir / "results.json").string() + "' 2> '" + (dir / "stderr.txt").string() + "'";
    const int status = std::system(cmd.c_str());
    const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (rc == 77 || rc == 127) {
      r.skip_all = rc == 127 ? python + " is not on PATH (set RLHOST_PYTHON)" : read_text(dir / "stderr.txt");
    } else if (rc != 0) {
      throw std::runtime_error("loss_reference.py failed (exit " + std::to_string(rc) + "):\n" +
                               read_text(dir / "stderr.txt"));
    } else {
      auto j = json::parse(read_text(dir / "results.json"));
      r.results = j["results"];
      r.skipped = j["skipped"];
    }
    fs::remove_all(dir);
    return r;
  }();
  return ref;
}

// Runs every case whose name starts with `prefix` and compares it key by key.
void check_cases(const std::string& prefix) {
  auto& ref = reference();
  if (!ref.skip_all.empty()) {
    rl::test::skip("loss parity (" + prefix + "): the PyTorch reference (tests/e2e/loss_reference.py) cannot run: " +
                       ref.skip_all,
                   "pip install torch for python3 (or name another python in RLHOST_PYTHON), or scripts/bootstrap.sh");
    return;
  }
  int checked = 0, skipped = 0;
  double worst = 0, grad_scale = 0;  // grad_scale: the largest reference gradient, for scale
  for (auto& c : ref.cases) {
    if (c.name.rfind(prefix, 0) != 0) continue;
    if (ref.skipped.contains(c.name)) {
      rl::test::skip("loss parity " + c.name + ": " + ref.skipped[c.name].get<std::string>(),
                     "pip install 'transformers==5.23.0', or scripts/bootstrap.sh --test-deps");
      ++skipped;
      continue;
    }
    CATCH_REQUIRE(ref.results.contains(c.name));
    const json& expected = ref.results[c.name];
    const Tensors got = run_cpp(c);
    CATCH_INFO("case " << c.name);
    std::vector<std::string> got_keys, want_keys;
    for (auto& [k, v] : got) got_keys.push_back(k);
    for (auto& [k, v] : expected.items()) want_keys.push_back(k);
    CATCH_CHECK(got_keys == want_keys);  // the same metrics apply on both sides
    for (auto& [k, v] : got) {
      if (!expected.contains(k)) continue;
      CATCH_INFO("key " << k);
      auto want = from_json(expected[k]);
      CATCH_REQUIRE(v.defined());
      CATCH_REQUIRE(v.sizes() == want.sizes());
      CATCH_CHECK(v.scalar_type() == torch::kFloat32);
      const double diff = want.numel() ? (v.detach().to(torch::kFloat64) - want).abs().max().item<double>() : 0.0;
      CATCH_CHECK(diff <= kTol);
      worst = std::max(worst, diff);
      if (k.rfind("grad/", 0) == 0 && want.numel()) grad_scale = std::max(grad_scale, want.abs().max().item<double>());
    }
    ++checked;
  }
  CATCH_CHECK(checked + skipped > 0);  // a typo in a prefix must not pass silently
  std::printf("loss parity %-12s %2d cases: max |rlhost - reference| = %.2e", prefix.c_str(), checked, worst);
  if (grad_scale > 0) std::printf(" (largest gradient %.2e)", grad_scale);
  std::printf("\n");
}

}  // namespace

CATCH_TEST_CASE("KL estimators match the PyTorch reference", "[losses][parity][python]") { check_cases("kl/"); }
CATCH_TEST_CASE("advantage estimators and whitening match the PyTorch reference", "[losses][parity][python]") {
  check_cases("advantages/");
  check_cases("whiten");
}
CATCH_TEST_CASE("ppo's GAE over the critic's values matches the PyTorch reference", "[losses][parity][python]") {
  check_cases("advantages/ppo/");
}
CATCH_TEST_CASE("the critic's clipped value loss matches the PyTorch reference", "[losses][parity][python]") {
  check_cases("value_loss/");
}
CATCH_TEST_CASE("sample_mean / token_mean reductions match the PyTorch reference", "[losses][parity][python]") {
  check_cases("reduce/");
}
CATCH_TEST_CASE("policy, KL, entropy, TIS and SFT losses match the PyTorch reference", "[losses][parity][python]") {
  check_cases("loss/");
}
CATCH_TEST_CASE("GRPO loss through a tiny Llama: parameter gradients match transformers", "[losses][parity][python]") {
  check_cases("model/");
}
