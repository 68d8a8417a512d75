// rl.model's native half (in librlhost_torch.so): load, init and use a transformer.
// Bad files and paths are runtime failures (nil, err); bad arguments raise.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/live_objects.hpp"
#include "bindings/host_context.hpp"
#include "bindings/torch_module.hpp"
#include "bindings/trampoline.hpp"
#include "nn/greedy.hpp"
#include "nn/logprobs.hpp"
#include "nn/lora.hpp"
#include "nn/transformer.hpp"
#include "nn/weights.hpp"

namespace rl::lua {
namespace {

const char kModelMt = 0;
const char kLoraMt = 0;
const char kLoaderMt = 0;

struct ModelBox : LiveObject {
  std::shared_ptr<nn::Transformer> model;
};

struct LoraBox : LiveObject {
  std::shared_ptr<nn::LoraAdapter> adapter;
};

// A model loading on a helper thread (the loop keeps serving meanwhile); its destructor
// joins the thread, so the job never outlives the box it writes into.
struct LoaderBox : LiveObject {
  std::shared_ptr<nn::Transformer> model;  // set by the job before its op completes
  OpThread worker;
  ~LoaderBox() { worker.stop(); }
};

nn::LoraAdapter& check_lora(lua_State* L, int idx) {
  auto* box = static_cast<LoraBox*>(check_udata(L, idx, &kLoraMt, "lora", "rl.model LoRA adapter handle"));
  if (!box->adapter) throw ArgError(idx, "lora", "the adapter was released");
  return *box->adapter;
}

nn::Transformer& check_model(lua_State* L, int idx) {
  auto* box = static_cast<ModelBox*>(check_udata(L, idx, &kModelMt, "model", "rl.model handle"));
  if (!box->model) throw ArgError(idx, "model", "the model was released");
  return *box->model;
}

std::vector<int64_t> ids_arg(lua_State* L, int idx, const char* name) {
  arg::table(L, idx, name);
  const size_t n = lua_objlen(L, idx);
  std::vector<int64_t> ids(n);
  for (size_t i = 0; i < n; ++i) {
    lua_rawgeti(L, idx, static_cast<int>(i + 1));
    if (!lua_isnumber(L, -1)) {
      lua_pop(L, 1);
      throw ArgError(idx, name, "array of token ids expected, element " + std::to_string(i + 1) + " is not a number");
    }
    ids[i] = static_cast<int64_t>(lua_tointeger(L, -1));
    lua_pop(L, 1);
  }
  return ids;
}

nn::ModelOptions options_arg(lua_State* L, int idx, const char* table) {
  nn::ModelOptions o;
  if (lua_isnoneornil(L, idx)) return o;
  arg::table(L, idx, table);
  if (auto d = arg::field_string(L, idx, "dtype", table)) o.dtype = nn::parse_dtype(std::string(*d));
  if (auto d = arg::field_string(L, idx, "device", table)) o.device = torch::Device(std::string(*d));
  return o;
}

void push_numbers(lua_State* L, const torch::Tensor& t) {
  auto c = t.to(torch::kCPU, torch::kFloat64).contiguous();  // the host reads it: copy off the device first
  const double* p = c.data_ptr<double>();
  lua_createtable(L, static_cast<int>(c.numel()), 0);
  for (int64_t i = 0; i < c.numel(); ++i) {
    lua_pushnumber(L, p[i]);
    lua_rawseti(L, -2, static_cast<int>(i + 1));
  }
}

torch::Tensor batch_of(const nn::Transformer& m, const std::vector<int64_t>& ids) {
  const int64_t vocab = m.config().vocab_size;
  for (auto id : ids)
    if (id < 0 || id >= vocab)
      throw std::out_of_range("token id " + std::to_string(id) + " outside the vocabulary [0, " +
                              std::to_string(vocab) + ")");
  return torch::tensor(ids, torch::kInt64).unsqueeze(0).to(m.options().device);
}

void push_model(lua_State* L, std::shared_ptr<nn::Transformer> model) {
  void* mem = lua_newuserdata(L, sizeof(ModelBox));
  auto* box = new (mem) ModelBox();
  box->model = std::move(model);
  registry_get(L, &kModelMt);
  lua_setmetatable(L, -2);
}

// model_load(path, {dtype=, device=}) -> handle | nil, err
int l_load(lua_State* L) {
  const std::string path(arg::string(L, 1, "path"));
  const auto opts = options_arg(L, 2, "opts");
  // weights = false: the parameters allocated but not read (a sharded trainer fills its
  // slices from the files itself; the untouched pages cost no memory).
  bool weights = true;
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "weights");
    if (lua_isboolean(L, -1)) weights = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  std::shared_ptr<nn::Transformer> model;
  try {
    if (!weights && std::filesystem::is_directory(path))
      model = std::make_shared<nn::Transformer>(model::ModelConfig::load(path), opts);
    else
      model = nn::Transformer::from_pretrained(path, opts);
  } catch (const std::exception& e) {
    return fail(L, e.what());
  }
  push_model(L, std::move(model));
  return 1;
}

// model_load_start(path, {dtype=, device=}) -> loader, op: the load runs on a helper
// thread; the op completes ("done", "") or ("error", why); then loader:take() -> handle.
int l_load_start(lua_State* L) {
  std::string path(arg::string(L, 1, "path"));
  const auto opts = options_arg(L, 2, "opts");
  void* mem = lua_newuserdata(L, sizeof(LoaderBox));
  auto* box = new (mem) LoaderBox();
  registry_get(L, &kLoaderMt);
  lua_setmetatable(L, -2);
  box->worker.start(L, [box, path = std::move(path), opts] {
    box->model = nn::Transformer::from_pretrained(path, opts);
    return std::string();
  });
  return 2;
}

// loader:take() -> the loaded model's handle (once; the op must have completed "done").
int l_loader_take(lua_State* L) {
  auto* box = static_cast<LoaderBox*>(check_udata(L, 1, &kLoaderMt, "loader", "rl.model loader"));
  if (box->worker.is_busy()) throw ArgError(1, "loader", "the model is still loading (await its op first)");
  box->worker.join();
  if (!box->model) throw ArgError(1, "loader", "no model: the load failed or was taken already");
  push_model(L, std::move(box->model));
  box->model.reset();
  return 1;
}

// model_init(config_json, dir, {seed=, dtype=}) -> true | nil, err
int l_init(lua_State* L) {
  const std::string config_json(arg::string(L, 1, "config"));
  const std::string dir(arg::string(L, 2, "dir"));
  arg::table(L, 3, "opts");
  const uint64_t seed = static_cast<uint64_t>(arg::field_integer(L, 3, "seed", "opts").value_or(0));
  const auto dtype = nn::parse_dtype(std::string(arg::field_string(L, 3, "dtype", "opts").value_or("float32")));
  try {
    auto config = model::ModelConfig::from_json(nlohmann::json::parse(config_json), "rl.model.init config");
    nn::Transformer m(std::move(config));
    m.init_random(seed);
    nn::save_model_dir(dir, m.config(), m.named_parameters(), dtype, size_t(5) << 30);
  } catch (const std::exception& e) {
    return fail(L, e.what());
  }
  lua_pushboolean(L, 1);
  return 1;
}

int l_config_json(lua_State* L) {
  const std::string text = check_model(L, 1).config().to_json().dump();
  lua_pushlstring(L, text.data(), text.size());
  return 1;
}

int l_num_parameters(lua_State* L) {
  int64_t n = 0;
  for (const auto& [name, t] : check_model(L, 1).named_parameters()) n += t.numel();
  lua_pushnumber(L, static_cast<double>(n));
  return 1;
}

// A listing of named tensors -> {{name=, shape={...}, dtype=}, ...}, in order.
template <class Named>
int push_param_list(lua_State* L, const Named& params) {
  lua_createtable(L, static_cast<int>(params.size()), 0);
  int i = 0;
  for (const auto& [name, t] : params) {
    lua_createtable(L, 0, 3);
    set_string(L, "name", name);
    set_string(L, "dtype", nn::dtype_config_name(t.scalar_type()));
    lua_createtable(L, static_cast<int>(t.dim()), 0);
    for (int64_t d = 0; d < t.dim(); ++d) {
      lua_pushnumber(L, static_cast<double>(t.size(d)));
      lua_rawseti(L, -2, static_cast<int>(d + 1));
    }
    lua_setfield(L, -2, "shape");
    lua_rawseti(L, -2, ++i);
  }
  return 1;
}

// parameters() -> {{name=, shape={...}, dtype=}, ...}
int l_parameters(lua_State* L) { return push_param_list(L, check_model(L, 1).named_parameters()); }

// logprobs(ids, {temperature=1}) -> {lp_2, ..., lp_n}: log p(ids[i] | ids[1..i-1])
int l_logprobs(lua_State* L) {
  auto& m = check_model(L, 1);
  m.check_whole("rl.model:logprobs");
  const auto ids = ids_arg(L, 2, "ids");
  double temperature = 1.0;
  if (!lua_isnoneornil(L, 3)) {
    arg::table(L, 3, "opts");
    temperature = arg::field_number(L, 3, "temperature", "opts").value_or(1.0);
  }
  if (ids.size() < 2) throw ArgError(2, "ids", "at least 2 token ids expected");
  torch::NoGradGuard no_grad;
  push_numbers(L, m.sequence_logprobs(batch_of(m, ids), temperature).logprobs[0]);
  return 1;
}

// logits(ids) -> {{v_1..v_V} per position}: for tests and small models.
int l_logits(lua_State* L) {
  auto& m = check_model(L, 1);
  m.check_whole("rl.model:logits");
  const auto ids = ids_arg(L, 2, "ids");
  if (ids.empty()) throw ArgError(2, "ids", "at least 1 token id expected");
  torch::NoGradGuard no_grad;
  auto logits = m.logits(m.forward(batch_of(m, ids)))[0];
  lua_createtable(L, static_cast<int>(ids.size()), 0);
  for (int64_t t = 0; t < logits.size(0); ++t) {
    push_numbers(L, logits[t]);
    lua_rawseti(L, -2, static_cast<int>(t + 1));
  }
  return 1;
}

// generate(ids, {max_new_tokens=16, stop_token_ids={...}}) -> new ids (greedy, KV cache)
int l_generate(lua_State* L) {
  auto& m = check_model(L, 1);
  m.check_whole("rl.model:generate");
  const auto ids = ids_arg(L, 2, "ids");
  int64_t max_new = 16;
  std::vector<int64_t> stops = m.config().eos_token_ids;
  if (!lua_isnoneornil(L, 3)) {
    arg::table(L, 3, "opts");
    max_new = arg::field_integer(L, 3, "max_new_tokens", "opts").value_or(16);
    lua_getfield(L, 3, "stop_token_ids");
    if (!lua_isnil(L, -1)) stops = ids_arg(L, lua_gettop(L), "opts.stop_token_ids");
    lua_pop(L, 1);
  }
  if (ids.empty()) throw ArgError(2, "ids", "at least 1 token id expected");
  if (max_new < 0) throw ArgError(3, "opts.max_new_tokens", "non-negative integer expected");
  batch_of(m, ids);  // range check
  const auto out = nn::greedy_generate(m, ids, max_new, stops);
  lua_createtable(L, static_cast<int>(out.size()), 0);
  for (size_t i = 0; i < out.size(); ++i) {
    lua_pushnumber(L, static_cast<double>(out[i]));
    lua_rawseti(L, -2, static_cast<int>(i + 1));
  }
  return 1;
}

// save(dir, {dtype=, max_shard_bytes=}) -> true | nil, err
int l_save(lua_State* L) {
  auto& m = check_model(L, 1);
  m.check_whole("rl.model:save");
  const std::string dir(arg::string(L, 2, "dir"));
  auto dtype = m.options().dtype;
  size_t shard = size_t(5) << 30;
  if (!lua_isnoneornil(L, 3)) {
    arg::table(L, 3, "opts");
    if (auto d = arg::field_string(L, 3, "dtype", "opts")) dtype = nn::parse_dtype(std::string(*d));
    if (auto s = arg::field_integer(L, 3, "max_shard_bytes", "opts")) shard = static_cast<size_t>(*s);
  }
  try {
    nn::save_model_dir(dir, m.config(), m.named_parameters(), dtype, shard);
  } catch (const std::exception& e) {
    return fail(L, e.what());
  }
  lua_pushboolean(L, 1);
  return 1;
}

// LoRA ---------------------------------------------------------------------------

// target_modules: a list of names or one string ("all-linear", or comma-separated names).
std::vector<std::string> target_modules_field(lua_State* L, int t) {
  std::vector<std::string> out;
  lua_getfield(L, t, "target_modules");
  const int v = lua_gettop(L);
  if (lua_isnil(L, v)) {
    out.push_back("all-linear");
  } else if (lua_type(L, v) == LUA_TSTRING) {
    std::string cur;
    for (char c : std::string(lua_tostring(L, v)) + ",") {
      if (c == ',') {
        if (!cur.empty()) out.push_back(cur);
        cur.clear();
      } else if (c != ' ') {
        cur += c;
      }
    }
  } else if (lua_istable(L, v)) {
    const size_t n = lua_objlen(L, v);
    for (size_t i = 1; i <= n; ++i) {
      lua_rawgeti(L, v, static_cast<int>(i));
      if (lua_type(L, -1) != LUA_TSTRING) {
        lua_pop(L, 2);
        throw ArgError(t, "opts.target_modules", "module names expected, element " + std::to_string(i) + " is not a string");
      }
      out.emplace_back(lua_tostring(L, -1));
      lua_pop(L, 1);
    }
  } else {
    lua_pop(L, 1);
    throw ArgError(t, "opts.target_modules", "a list of module names or \"all-linear\" expected");
  }
  lua_pop(L, 1);
  return out;
}

// new_lora({rank=8, alpha=16, target_modules="all-linear", seed=0, identity=true}) -> lora handle
int l_new_lora(lua_State* L) {
  auto& m = check_model(L, 1);
  const int t = 2;
  if (!lua_isnoneornil(L, t)) {
    arg::table(L, t, "opts");
  } else {
    lua_settop(L, 1);
    lua_newtable(L);
  }
  const int64_t rank = arg::field_integer(L, t, "rank", "opts").value_or(8);
  const double alpha = arg::field_number(L, t, "alpha", "opts").value_or(16.0);
  const uint64_t seed = static_cast<uint64_t>(arg::field_integer(L, t, "seed", "opts").value_or(0));
  const bool identity = arg::field_boolean(L, t, "identity", "opts").value_or(true);
  nn::LoraConfig cfg;
  try {
    cfg = nn::make_lora_config(rank, alpha, target_modules_field(L, t));
  } catch (const std::invalid_argument& e) {
    throw ArgError(t, "opts", e.what());
  }
  auto a = std::make_shared<nn::LoraAdapter>(m.config(), cfg,
                                             torch::TensorOptions().dtype(torch::kFloat32).device(m.options().device));
  a->init(seed, identity);
  push_lora(L, std::move(a));
  return 1;
}

// set_lora(lora | nil): forward, logprobs and logits apply it (nil: the base alone)
int l_set_lora(lua_State* L) {
  auto& m = check_model(L, 1);
  if (lua_isnoneornil(L, 2)) {
    m.set_lora(nullptr);
    return 0;
  }
  check_lora(L, 2);
  try {
    m.set_lora(static_cast<LoraBox*>(lua_touserdata(L, 2))->adapter);
  } catch (const std::invalid_argument& e) {
    throw ArgError(2, "lora", e.what());
  }
  return 0;
}

// lora_grads(ids) -> {name = {flat values}}: the gradient, for the set adapter's tensors,
// of the mean negative log-likelihood of ids[2..n] (for checks against other implementations)
int l_lora_grads(lua_State* L) {
  auto& m = check_model(L, 1);
  m.check_whole("rl.model:lora_grads");
  const auto ids = ids_arg(L, 2, "ids");
  if (ids.size() < 2) throw ArgError(2, "ids", "at least 2 token ids expected");
  const auto& a = m.lora();
  if (!a) throw ArgError(1, "model", "no LoRA adapter set (model:set_lora)");
  torch::Tensor batch = batch_of(m, ids);
  std::vector<torch::Tensor> ps = a->parameters();
  std::vector<bool> had;
  for (auto& p : ps) had.push_back(p.requires_grad()), p.requires_grad_(true);
  std::vector<torch::Tensor> grads;
  {
    torch::AutoGradMode on(true);
    auto loss = -m.sequence_logprobs(batch).logprobs.mean();
    grads = torch::autograd::grad({loss}, ps);
  }
  for (size_t i = 0; i < ps.size(); ++i) ps[i].requires_grad_(had[i]);
  lua_createtable(L, 0, static_cast<int>(ps.size()));
  const auto& named = a->named_parameters();
  for (size_t i = 0; i < named.size(); ++i) {
    push_numbers(L, grads[i].reshape({-1}));
    lua_setfield(L, -2, named[i].first.c_str());
  }
  return 1;
}

// load_lora(dir, model) -> lora handle | nil, err (a PEFT adapter directory)
int l_load_lora(lua_State* L) {
  const std::string dir(arg::string(L, 1, "dir"));
  auto& m = check_model(L, 2);
  std::shared_ptr<nn::LoraAdapter> a;
  try {
    a = nn::load_peft_adapter(dir, m.config(), torch::TensorOptions().dtype(torch::kFloat32).device(m.options().device));
  } catch (const std::exception& e) {
    return fail(L, e.what());
  }
  push_lora(L, std::move(a));
  return 1;
}

// lora:save_peft(dir, base_model_name_or_path) -> true | nil, err
int l_lora_save_peft(lua_State* L) {
  auto& a = check_lora(L, 1);
  const std::string dir(arg::string(L, 2, "dir"));
  const std::string base(arg::opt_string(L, 3, "base_model").value_or(""));
  try {
    nn::save_peft_adapter(a, dir, base);
  } catch (const std::exception& e) {
    return fail(L, e.what());
  }
  lua_pushboolean(L, 1);
  return 1;
}

// lora:config() -> {rank=, alpha=, target_modules={...}}
int l_lora_config(lua_State* L) {
  const auto& c = check_lora(L, 1).config();
  lua_createtable(L, 0, 3);
  set_number(L, "rank", static_cast<double>(c.rank));
  set_number(L, "alpha", c.alpha);
  const auto targets = nn::lora_target_modules(c);
  lua_createtable(L, static_cast<int>(targets.size()), 0);
  int i = 0;
  for (const auto& t : targets) {
    lua_pushlstring(L, t.data(), t.size());
    lua_rawseti(L, -2, ++i);
  }
  lua_setfield(L, -2, "target_modules");
  return 1;
}

// lora:parameters() -> {{name=, shape={...}, dtype=}, ...} (PEFT's names, in order)
int l_lora_parameters(lua_State* L) { return push_param_list(L, check_lora(L, 1).named_parameters()); }

}  // namespace

void push_lora(lua_State* L, std::shared_ptr<nn::LoraAdapter> adapter) {
  void* mem = lua_newuserdata(L, sizeof(LoraBox));
  auto* box = new (mem) LoraBox();
  box->adapter = std::move(adapter);
  registry_get(L, &kLoraMt);
  lua_setmetatable(L, -2);
}

std::shared_ptr<nn::LoraAdapter> lora_from(lua_State* L, int idx) {
  check_lora(L, idx);
  return static_cast<LoraBox*>(lua_touserdata(L, idx))->adapter;
}

std::shared_ptr<nn::Transformer> model_from(lua_State* L, int idx) {
  check_model(L, idx);
  return static_cast<ModelBox*>(lua_touserdata(L, idx))->model;
}

void open_model(lua_State* L, int t) {
  static const Reg methods[] = {
      {"config_json", entry<l_config_json>}, {"num_parameters", entry<l_num_parameters>},
      {"parameters", entry<l_parameters>},   {"logprobs", entry<l_logprobs>},
      {"logits", entry<l_logits>},           {"generate", entry<l_generate>},
      {"save", entry<l_save>},
      {"new_lora", entry<l_new_lora>},       {"set_lora", entry<l_set_lora>},
      {"lora_grads", entry<l_lora_grads>},
  };
  make_metatable(L, &kModelMt, "rl.model.Model:", methods, std::size(methods), entry<destroy_udata<ModelBox>>);
  static const Reg lora_methods[] = {
      {"save_peft", entry<l_lora_save_peft>},
      {"config", entry<l_lora_config>},
      {"parameters", entry<l_lora_parameters>},
  };
  make_metatable(L, &kLoraMt, "rl.model.Lora:", lora_methods, std::size(lora_methods), entry<destroy_udata<LoraBox>>);
  static const Reg loader_methods[] = {{"take", entry<l_loader_take>}};
  make_metatable(L, &kLoaderMt, "rl.model.Loader:", loader_methods, std::size(loader_methods),
                 entry<destroy_udata<LoaderBox>>);
  static const Reg regs[] = {
      {"model_load", entry<l_load>},
      {"model_load_start", entry<l_load_start>},
      {"model_init", entry<l_init>},
      {"load_lora", entry<l_load_lora>},
  };
  register_functions(L, t, "rl.model.", regs);
}

}  // namespace rl::lua
