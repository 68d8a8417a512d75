// rl.tinker's trainer half (in librlhost_torch.so): a trainer/stepwise.hpp over an
// rl.model handle, one per Tinker training client. Calls run on the handle's helper
// thread and complete an op; the caller (lua/rl/tinker/training.lua) runs one call at a
// time per base model, since the clients of one base share its weights.
//
//   _stepwise.new(model, lora_json|nil) -> handle   lora_json: {rank, alpha, seed, targets = {...}}
//                                                   (nil: every parameter trains)
//   handle:forward_backward(data, loss_fn, config, forward_only) -> op ("done", json)
//        data: {{tokens = {...}, loss_fn_inputs = {name = {dtype, shape, data} | {...}}}, ...}
//        json: {logprobs = {{...}, ...}, elementwise_loss = {{...}, ...}, metrics = {["loss:sum"] = x}}
//   handle:optim_step(adam_json) -> op ("done", {grad_norm, learning_rate, optim_steps})
//   handle:save(dir, with_optimizer, base_name) -> op     the adapter as PEFT files (+ optimizer.pt)
//   handle:load(dir, with_optimizer) -> op                 the same back
//   handle:steps(), handle:pending()
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/live_objects.hpp"
#include "bindings/host_context.hpp"
#include "bindings/torch_module.hpp"
#include "bindings/trampoline.hpp"
#include "nn/lora.hpp"
#include "trainer/stepwise.hpp"

namespace rl::lua {
namespace {

using nlohmann::json;
const char kStepwiseMt = 0;

struct StepwiseBox : LiveObject {
  std::shared_ptr<trainer::StepwiseTrainer> trainer;
  OpThread worker;
  ~StepwiseBox() { worker.stop(); }
};

StepwiseBox& check_box(lua_State* L, int idx) {
  return *static_cast<StepwiseBox*>(check_udata(L, idx, &kStepwiseMt, "trainer", "rl.tinker training handle"));
}

int start_job(lua_State* L, StepwiseBox& box, std::function<json()> fn) {
  if (box.worker.is_busy()) throw ArgError(1, "trainer", "the training client is busy with another call");
  return box.worker.start(L, [fn = std::move(fn)] { return fn().dump(); });
}

// The number list at the top of the stack into `out` (as float64; the caller converts).
void number_list(lua_State* L, const std::string& what, std::vector<double>& out) {
  if (!lua_istable(L, -1)) throw ArgError(2, "data", what + ": a list of numbers expected");
  const size_t n = lua_objlen(L, -1);
  out.resize(n);
  for (size_t i = 0; i < n; ++i) {
    lua_rawgeti(L, -1, static_cast<int>(i + 1));
    if (!lua_isnumber(L, -1)) {
      lua_pop(L, 1);
      throw ArgError(2, "data", what + "[" + std::to_string(i + 1) + "] is not a number");
    }
    out[i] = lua_tonumber(L, -1);
    lua_pop(L, 1);
  }
}

// One loss input: {dtype, shape, data} (the wire's decode) or a plain number list (float32).
torch::Tensor input_tensor(lua_State* L, const std::string& what) {
  std::string dtype = "float32";
  std::vector<double> values;
  lua_getfield(L, -1, "data");
  const bool wrapped = lua_istable(L, -1);
  if (wrapped) {
    number_list(L, what + ".data", values);
    lua_pop(L, 1);
    lua_getfield(L, -1, "dtype");
    if (lua_type(L, -1) == LUA_TSTRING) dtype = lua_tostring(L, -1);
    lua_pop(L, 1);
  } else {
    lua_pop(L, 1);
    number_list(L, what, values);
  }
  if (dtype == "int64") {
    std::vector<int64_t> v(values.begin(), values.end());
    return torch::tensor(v, torch::kInt64);
  }
  if (dtype != "float32") throw ArgError(2, "data", what + ": dtype float32 or int64 expected, got " + dtype);
  std::vector<float> v(values.begin(), values.end());
  return torch::tensor(v, torch::kFloat32);
}

std::vector<trainer::Datum> data_arg(lua_State* L, int idx) {
  arg::table(L, idx, "data");
  std::vector<trainer::Datum> out;
  const size_t n = lua_objlen(L, idx);
  for (size_t i = 0; i < n; ++i) {
    const std::string where = "data[" + std::to_string(i + 1) + "]";
    lua_rawgeti(L, idx, static_cast<int>(i + 1));
    if (!lua_istable(L, -1)) throw ArgError(idx, "data", where + ": a table expected");
    trainer::Datum d;
    lua_getfield(L, -1, "tokens");
    std::vector<double> tokens;
    number_list(L, where + ".tokens", tokens);
    lua_pop(L, 1);
    d.tokens.assign(tokens.begin(), tokens.end());
    lua_getfield(L, -1, "loss_fn_inputs");
    if (!lua_istable(L, -1)) throw ArgError(idx, "data", where + ".loss_fn_inputs: a table expected");
    lua_pushnil(L);
    while (lua_next(L, -2)) {
      if (lua_type(L, -2) != LUA_TSTRING) throw ArgError(idx, "data", where + ".loss_fn_inputs: names must be strings");
      const std::string name = lua_tostring(L, -2);
      d.inputs[name] = input_tensor(L, where + ".loss_fn_inputs." + name);
      lua_pop(L, 1);
    }
    lua_pop(L, 2);
    out.push_back(std::move(d));
  }
  return out;
}

std::map<std::string, double> config_arg(lua_State* L, int idx) {
  std::map<std::string, double> out;
  if (lua_isnoneornil(L, idx)) return out;
  arg::table(L, idx, "config");
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (lua_type(L, -2) != LUA_TSTRING || !lua_isnumber(L, -1))
      throw ArgError(idx, "config", "loss_fn_config: names → numbers expected");
    out[lua_tostring(L, -2)] = lua_tonumber(L, -1);
    lua_pop(L, 1);
  }
  return out;
}

json tensors_json(const std::vector<torch::Tensor>& ts) {
  json out = json::array();
  for (const auto& t : ts) {
    const auto c = t.to(torch::kFloat32).contiguous();
    const float* p = c.data_ptr<float>();
    out.push_back(std::vector<float>(p, p + c.numel()));
  }
  return out;
}

// new(model, lora_json|nil) -> handle
int l_new(lua_State* L) {
  auto model = model_from(L, 1);
  std::shared_ptr<nn::LoraAdapter> adapter;
  if (auto text = arg::opt_string(L, 2, "lora")) {
    json j;
    try {
      j = json::parse(*text);
    } catch (const std::exception& e) {
      throw ArgError(2, "lora", std::string("JSON text expected: ") + e.what());
    }
    std::vector<std::string> targets{"all-linear"};
    if (j.contains("targets")) targets = j.at("targets").get<std::vector<std::string>>();
    const int64_t rank = j.value("rank", int64_t{8});
    nn::LoraConfig cfg;
    try {
      cfg = nn::make_lora_config(rank, j.value("alpha", static_cast<double>(rank)), targets);
    } catch (const std::exception& e) {
      throw ArgError(2, "lora", e.what());
    }
    adapter = std::make_shared<nn::LoraAdapter>(model->config(), cfg);
    adapter->init(j.value("seed", uint64_t{0}));
  }
  auto t = std::make_shared<trainer::StepwiseTrainer>(model, adapter);
  void* mem = lua_newuserdata(L, sizeof(StepwiseBox));
  auto* box = new (mem) StepwiseBox();
  box->trainer = std::move(t);
  registry_get(L, &kStepwiseMt);
  lua_setmetatable(L, -2);
  return 1;
}

// forward_backward(data, loss_fn, config, forward_only) -> op
int l_forward_backward(lua_State* L) {
  StepwiseBox& box = check_box(L, 1);
  auto data = std::make_shared<std::vector<trainer::Datum>>(data_arg(L, 2));
  const std::string loss_fn(arg::string(L, 3, "loss_fn"));
  const auto config = config_arg(L, 4);
  const bool forward_only = lua_toboolean(L, 5);
  auto t = box.trainer;
  // bad data raises here, in the caller: a user error, before the call is queued
  trainer::validate_datums(loss_fn, *data, config, t->model().config().vocab_size);
  return start_job(L, box, [t, data, loss_fn, config, forward_only] {
    auto r = forward_only ? t->forward(*data, loss_fn, config) : t->forward_backward(*data, loss_fn, config);
    return json{{"logprobs", tensors_json(r.logprobs)},
                {"elementwise_loss", tensors_json(r.elementwise)},
                {"metrics", r.metrics}};
  });
}

// optim_step(adam_json) -> op
int l_optim_step(lua_State* L) {
  StepwiseBox& box = check_box(L, 1);
  const std::string text(arg::string(L, 2, "adam_params"));
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    throw ArgError(2, "adam_params", std::string("JSON text expected: ") + e.what());
  }
  trainer::AdamParams p;
  p.learning_rate = j.value("learning_rate", p.learning_rate);
  p.beta1 = j.value("beta1", p.beta1);
  p.beta2 = j.value("beta2", p.beta2);
  p.eps = j.value("eps", p.eps);
  p.weight_decay = j.value("weight_decay", p.weight_decay);
  p.grad_clip_norm = j.value("grad_clip_norm", p.grad_clip_norm);
  auto t = box.trainer;
  return start_job(L, box, [t, p] { return json(t->optim_step(p)); });
}

// save(dir, with_optimizer, base_name) -> op: the adapter as PEFT files, the optimiser's
// state in optimizer.pt, the step count in stepwise_state.json.
int l_save(lua_State* L) {
  StepwiseBox& box = check_box(L, 1);
  const std::filesystem::path dir(std::string(arg::string(L, 2, "dir")));
  const bool with_optimizer = lua_toboolean(L, 3);
  const std::string base(arg::opt_string(L, 4, "base_name").value_or(""));
  auto t = box.trainer;
  if (!t->adapter()) throw ArgError(1, "trainer", "save: this training client has no LoRA adapter");
  return start_job(L, box, [t, dir, with_optimizer, base] {
    std::filesystem::create_directories(dir);
    nn::save_peft_adapter(*t->adapter(), dir, base);
    if (with_optimizer) torch::save(t->optimizer(), (dir / "optimizer.pt").string());
    std::ofstream(dir / "stepwise_state.json") << json{{"optim_steps", t->steps()}}.dump();
    return json{{"path", dir.string()}};
  });
}

// load(dir, with_optimizer) -> op
int l_load(lua_State* L) {
  StepwiseBox& box = check_box(L, 1);
  const std::filesystem::path dir(std::string(arg::string(L, 2, "dir")));
  const bool with_optimizer = lua_toboolean(L, 3);
  auto t = box.trainer;
  if (!t->adapter()) throw ArgError(1, "trainer", "load: this training client has no LoRA adapter");
  return start_job(L, box, [t, dir, with_optimizer] {
    auto loaded = nn::load_peft_adapter(dir, t->model().config());
    const auto& mine = t->adapter()->named_parameters();
    const auto& theirs = loaded->named_parameters();
    if (mine.size() != theirs.size())
      throw std::runtime_error(dir.string() + ": the adapter's targets differ from this training client's");
    {
      torch::NoGradGuard ng;
      for (size_t i = 0; i < mine.size(); ++i) {
        if (mine[i].first != theirs[i].first || !mine[i].second.sizes().equals(theirs[i].second.sizes()))
          throw std::runtime_error(dir.string() + ": tensor " + theirs[i].first + " does not fit this training client");
        mine[i].second.copy_(theirs[i].second);
      }
    }
    t->zero_grad();
    if (with_optimizer) {
      const auto opt_file = dir / "optimizer.pt";
      if (!std::filesystem::exists(opt_file))
        throw std::runtime_error(opt_file.string() + " is missing: this checkpoint was saved without optimizer state");
      torch::load(t->optimizer(), opt_file.string());
      std::ifstream in(dir / "stepwise_state.json");
      if (in) t->set_steps(json::parse(in).value("optim_steps", int64_t{0}));
    }
    return json{{"path", dir.string()}};
  });
}

int l_steps(lua_State* L) {
  lua_pushnumber(L, static_cast<lua_Number>(check_box(L, 1).trainer->steps()));
  return 1;
}

int l_pending(lua_State* L) {
  lua_pushnumber(L, static_cast<lua_Number>(check_box(L, 1).trainer->pending_forward_backwards()));
  return 1;
}

}  // namespace

void open_stepwise(lua_State* L, int t) {
  static const Reg methods[] = {
      {"forward_backward", entry<l_forward_backward>}, {"optim_step", entry<l_optim_step>},
      {"save", entry<l_save>}, {"load", entry<l_load>}, {"steps", entry<l_steps>}, {"pending", entry<l_pending>},
  };
  make_metatable(L, &kStepwiseMt, "rl.tinker.Training:", methods, std::size(methods), entry<destroy_udata<StepwiseBox>>);
  static const Reg regs[] = {{"new", entry<l_new>}};
  register_functions(L, t, "rl.tinker.", regs);
}

}  // namespace rl::lua
