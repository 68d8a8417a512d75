// rl.trainer's native half (in librlhost_torch.so): a Trainer over an rl.model
// handle. Training and weight hand-offs run on a helper thread and complete an
// op (the calling task waits; the event loop, the REPL and servers keep going);
// a trainer runs one such job at a time.
//
//   _trainer.trainer_new(policy, ref|nil, opts_json, policy_dir|nil, ref_dir|nil, critic|nil) -> handle
//                                          (the dirs: a sharded trainer's skeletons' files;
//                                          critic: the value model's decoder, with use_critic)
//   handle:train(batch) -> op ("done", metrics_json)
//   handle:sync(engine, version|nil) -> op ("done", json)   in-memory weights to a thread-mode engine
//   handle:sync_lora(engine, name, version|nil) -> op   the LoRA adapter, a copy loaded under `name`
//   (adapter = true below: the LoRA adapter's tensors, PEFT names, rather than the policy's)
//   handle:response_logprobs(batch) -> {{...}, ...}
//   handle:response_values(batch) -> {{...}, ...}   the critic's values (use_critic)
//   handle:weight_meta(adapter?) -> {names, dtypes, shapes} json (what /update_weights_from_distributed
//                                          takes; adapter: also r, lora_alpha, target_modules)
//   handle:group_connect(group) -> op      the trainer joins a weight-sync group (rank 0)
//   handle:send_weights(group, bucket_bytes?, adapter?) -> op   broadcasts every parameter over it (bucketed);
//                                                           → {seconds, copied_bytes (packed before sending)}
//   handle:replica_digest() -> op {digest}   the policy's weights digest ("" unless exact; sharded: "")
//   handle:shm_write(layout_json, buffer, adapter?) -> op  every parameter into an engine's shared-memory buffer
//   handle:shm_forget(id)                  unmaps that engine's file
//   handle:save_model(dir, dtype|nil, max_shard_bytes|nil, driven) -> op   the policy as a HF directory
//   handle:follow_gathers() -> op, handle:gathers_done() -> op   a sharded trainer's sync
//                                          (ranks > 0 follow rank 0's gathers until done)
//   handle:step(), handle:lr()
//   handle:lora() -> the trained LoRA adapter's handle (rl.model's; lora_rank > 0) | nil
//   handle:set_cpus(list|nil)              its jobs' thread (and the LibTorch threads that
//                                          thread starts) runs on these CPUs; nil: anywhere
//   handle:save(root, iteration|nil, meta_json) -> op ("done", {path, iteration, files, seconds})
//   handle:load(dir, weights) -> op ("done", trainer_state.json)
//   _trainer.checkpoint_resolve(path) -> dir, trainer_state_json | nil, err
//   _trainer.default_options() -> json   every option's C++ default, by slime's name
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/live_objects.hpp"
#include "bindings/host_context.hpp"
#include "bindings/torch_module.hpp"
#include "bindings/trampoline.hpp"
#include "engine/engine_weights.hpp"
#include "model/weight_buckets.hpp"
#include "nn/shared_weights.hpp"
#include "nn/weights.hpp"
#include "trainer/checkpoint.hpp"
#include "trainer/sharded_io.hpp"
#include "dist/dist.hpp"
#include "trainer/trainer.hpp"
#include "trainer/trainer_options.hpp"

namespace rl::lua {
namespace {

using nlohmann::json;
const char kTrainerMt = 0;

// Engines' shared-memory files this trainer has mapped, by layout id (made on
// the helper thread on first use, dropped by shm_forget or with the trainer).
struct ShmWriters {
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<nn::SharedWeightsWriter>> by_id;
};

struct TrainerBox : LiveObject {
  std::shared_ptr<trainer::Trainer> trainer;
  std::shared_ptr<ShmWriters> shm = std::make_shared<ShmWriters>();
  OpThread worker;

  ~TrainerBox() { worker.stop(); }
};

TrainerBox& check_box(lua_State* L, int idx) {
  return *static_cast<TrainerBox*>(check_udata(L, idx, &kTrainerMt, "trainer", "rl.trainer handle"));
}

// A Lua array of numbers at stack index `idx` into `out`.
template <class T>
void numbers(lua_State* L, int idx, const std::string& what, std::vector<T>& out) {
  if (!lua_istable(L, idx)) throw ArgError(2, "batch", what + ": a list of numbers expected");
  const size_t n = lua_objlen(L, idx);
  out.resize(n);
  for (size_t i = 0; i < n; ++i) {
    lua_rawgeti(L, idx, static_cast<int>(i + 1));
    if (!lua_isnumber(L, -1)) {
      lua_pop(L, 1);
      throw ArgError(2, "batch", what + "[" + std::to_string(i + 1) + "] is not a number");
    }
    out[i] = static_cast<T>(lua_tonumber(L, -1));
    lua_pop(L, 1);
  }
}

// batch.<field>: a list (one entry per sample) of number lists, or of numbers.
template <class T>
void rows(lua_State* L, int t, const char* field, std::vector<std::vector<T>>& out, bool optional = false) {
  lua_getfield(L, t, field);
  if (lua_isnil(L, -1) && optional) {
    lua_pop(L, 1);
    return;
  }
  if (!lua_istable(L, -1)) {
    lua_pop(L, 1);
    throw ArgError(2, "batch", std::string("batch.") + field + ": a list per sample expected");
  }
  const int list = lua_gettop(L);
  const size_t n = lua_objlen(L, list);
  out.resize(n);
  for (size_t i = 0; i < n; ++i) {
    lua_rawgeti(L, list, static_cast<int>(i + 1));
    numbers(L, lua_gettop(L), std::string("batch.") + field + "[" + std::to_string(i + 1) + "]", out[i]);
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

template <class T>
void column(lua_State* L, int t, const char* field, std::vector<T>& out) {
  lua_getfield(L, t, field);
  numbers(L, lua_gettop(L), std::string("batch.") + field, out);
  lua_pop(L, 1);
}

trainer::TrainBatch batch_arg(lua_State* L, int idx) {
  arg::table(L, idx, "batch");
  trainer::TrainBatch b;
  rows(L, idx, "tokens", b.tokens);
  column(L, idx, "response_lengths", b.response_lengths);
  column(L, idx, "rewards", b.rewards);
  rows(L, idx, "loss_masks", b.loss_masks);
  rows(L, idx, "rollout_log_probs", b.rollout_log_probs, true);
  rows(L, idx, "teacher_log_probs", b.teacher_log_probs, true);
  // batch.logprob_digests (optional): per sample, the digest its engine reported ("" none)
  lua_getfield(L, idx, "logprob_digests");
  if (lua_istable(L, -1)) {
    const int list = lua_gettop(L);
    const size_t n = lua_objlen(L, list);
    b.logprob_digests.resize(n);
    for (size_t i = 0; i < n; ++i) {
      lua_rawgeti(L, list, static_cast<int>(i + 1));
      if (lua_type(L, -1) == LUA_TSTRING) b.logprob_digests[i] = lua_tostring(L, -1);
      lua_pop(L, 1);
    }
  } else if (!lua_isnil(L, -1)) {
    lua_pop(L, 1);
    throw ArgError(2, "batch", "batch.logprob_digests: a list per sample expected");
  }
  lua_pop(L, 1);
  return b;
}

// Runs fn on the trainer's helper thread; its JSON result completes the op.
int start_job(lua_State* L, TrainerBox& box, std::function<json()> fn) {
  if (box.worker.is_busy()) throw ArgError(1, "trainer", "the trainer is busy with another train/sync/save/load call");
  return box.worker.start(L, [fn = std::move(fn)] { return fn().dump(); });
}

// trainer_new(policy, ref|nil, opts_json, policy_dir|nil, ref_dir|nil, critic|nil) -> handle (bad options raise)
int l_new(lua_State* L) {
  auto policy = model_from(L, 1);
  std::shared_ptr<nn::Transformer> ref;
  if (!lua_isnoneornil(L, 2)) ref = model_from(L, 2);
  const std::string text(arg::opt_string(L, 3, "opts").value_or("{}"));
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    throw ArgError(3, "opts", std::string("JSON text expected: ") + e.what());
  }
  trainer::ShardSources sources;  // sharded: each rank reads its slices from these directories
  if (auto d = arg::opt_string(L, 4, "policy_dir")) sources.policy = std::string(*d);
  if (auto d = arg::opt_string(L, 5, "ref_dir")) sources.ref = std::string(*d);
  std::shared_ptr<nn::Transformer> critic;
  if (!lua_isnoneornil(L, 6)) critic = model_from(L, 6);
  auto t = std::make_shared<trainer::Trainer>(policy, ref, trainer::trainer_options_from_json(j), sources, critic);
  void* mem = lua_newuserdata(L, sizeof(TrainerBox));
  auto* box = new (mem) TrainerBox();
  box->trainer = std::move(t);
  registry_get(L, &kTrainerMt);
  lua_setmetatable(L, -2);
  return 1;
}

int l_train(lua_State* L) {
  TrainerBox& box = check_box(L, 1);
  auto batch = std::make_shared<trainer::TrainBatch>(batch_arg(L, 2));
  box.trainer->validate(*batch);  // a bad batch raises here, in the caller
  auto t = box.trainer;
  return start_job(L, box, [t, batch] {
    json out = json::object();
    for (const auto& [k, v] : t->train(*batch)) out[k] = v;
    json samples = json::array();
    for (const auto& st : t->sample_stats())
      samples.push_back({{"advantage", st.advantage}, {"loss_weight", st.loss_weight},
                         {"clipped_frac", st.clipped_frac}, {"logp_mean", st.logp_mean}, {"step", st.step}});
    return json{{"metrics", out}, {"samples", samples}};
  });
}

int l_sync(lua_State* L) {
  TrainerBox& box = check_box(L, 1);
  auto eng = engine_from(L, 2);
  std::optional<std::string> version;
  if (auto v = arg::opt_string(L, 3, "version")) version = std::string(*v);
  auto t = box.trainer;
  return start_job(L, box, [t, eng, version] {
    const auto t0 = std::chrono::steady_clock::now();
    torch::NoGradGuard ng;
    if (t->sharded()) {
      // The engine swaps all its weights between two steps: the gathered units are
      // staged here first (the one whole copy a sharded sync makes, what the engine takes).
      nn::NamedTensors staged;
      trainer::driven_pass(*t, [&](const nn::NamedTensors& unit) {
        for (const auto& [name, w] : unit) staged.emplace_back(name, w.clone());
      });
      engine::update_weights(*eng, staged, version);
    } else {
      engine::update_weights(*eng, t->policy().named_parameters(), version);
    }
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return json{{"success", true}, {"weight_version", eng->weight_version()}, {"seconds", dt}};
  });
}

// The trained adapter (adapter = true in the calls below), or an ArgError at `idx`.
std::shared_ptr<nn::LoraAdapter> adapter_of(lua_State* L, TrainerBox& box, int idx) {
  auto a = box.trainer->lora();
  if (!a) throw ArgError(idx, "adapter", "this trainer has no LoRA adapter (lora_rank = 0)");
  return a;
}

bool wants_adapter(lua_State* L, int idx) { return lua_toboolean(L, idx) != 0; }

int l_sync_lora(lua_State* L) {
  TrainerBox& box = check_box(L, 1);
  auto eng = engine_from(L, 2);
  const std::string name(arg::string(L, 3, "name"));
  std::optional<std::string> version;
  if (auto v = arg::opt_string(L, 4, "version")) version = std::string(*v);
  auto a = adapter_of(L, box, 1);
  return start_job(L, box, [eng, a, name, version] {
    const auto t0 = std::chrono::steady_clock::now();
    const engine::LoraInfo info = engine::load_lora_adapter(*eng, name, *a, version);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return json{{"success", true}, {"weight_version", info.version}, {"seconds", dt}};
  });
}

// The order a whole (unsharded) model is broadcast in: model::weight_send_order. The
// meta the engines get and the broadcasts follow it alike.
std::vector<size_t> send_order(const nn::NamedTensors& params) {
  std::vector<std::string> names;
  std::vector<int64_t> bytes;
  for (const auto& [name, t] : params) {
    names.push_back(name);
    bytes.push_back(t.numel() * static_cast<int64_t>(t.element_size()));
  }
  return model::weight_send_order(names, bytes);
}

int l_weight_meta(lua_State* L) {
  TrainerBox& box = check_box(L, 1);
  json names = json::array(), dtypes = json::array(), shapes = json::array();
  if (wants_adapter(L, 2)) {
    auto a = adapter_of(L, box, 2);
    for (const auto& [name, t] : a->named_parameters()) {
      names.push_back(name);
      dtypes.push_back(nn::dtype_config_name(t.scalar_type()));
      shapes.push_back(t.sizes().vec());
    }
    const auto& c = a->config();
    const std::string s = json{{"names", names}, {"dtypes", dtypes}, {"shapes", shapes}, {"r", c.rank},
                               {"lora_alpha", c.alpha}, {"target_modules", nn::lora_target_modules(c)}}.dump();
    lua_pushlstring(L, s.data(), s.size());
    return 1;
  }
  // In the order the weights are sent: a sharded trainer's unit by unit.
  const auto& params = box.trainer->policy().named_parameters();
  std::vector<size_t> order;
  for (const auto& unit : box.trainer->policy().parameter_units()) order.insert(order.end(), unit.begin(), unit.end());
  if (!box.trainer->sharded()) order = send_order(params);
  for (size_t i : order) {
    const auto& [name, t] = params[i];
    names.push_back(name);
    dtypes.push_back(nn::dtype_config_name(t.scalar_type()));
    shapes.push_back(t.sizes().vec());
  }
  const std::string s = json{{"names", names}, {"dtypes", dtypes}, {"shapes", shapes}}.dump();
  lua_pushlstring(L, s.data(), s.size());
  return 1;
}

int l_replica_digest(lua_State* L) {
  TrainerBox& box = check_box(L, 1);
  auto t = box.trainer;
  return start_job(L, box, [t] { return json{{"digest", t->replica_digest()}}; });
}

int l_group_connect(lua_State* L) {
  TrainerBox& box = check_box(L, 1);
  auto g = group_from(L, 2);
  return start_job(L, box, [g] {
    g->connect();
    return json{{"success", true}};
  });
}

int l_send_weights(lua_State* L) {
  TrainerBox& box = check_box(L, 1);
  auto g = group_from(L, 2);
  auto t = box.trainer;
  const int64_t bucket = arg::opt_integer(L, 3, "bucket_bytes").value_or(0);
  if (bucket < 0) throw ArgError(3, "bucket_bytes", ">= 0 expected (0: a broadcast per tensor)");
  if (bucket > 0 && t->sharded()) throw ArgError(3, "bucket_bytes", "a sharded trainer sends a tensor at a time (0)");
  if (wants_adapter(L, 4)) {
    auto a = adapter_of(L, box, 4);
    return start_job(L, box, [a, g, bucket] {
      const auto t0 = std::chrono::steady_clock::now();
      const int64_t copied = dist::send_weights(*g, a->named_parameters(), bucket).copied_bytes;
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return json{{"success", true}, {"seconds", dt}, {"copied_bytes", copied}};
    });
  }
  return start_job(L, box, [t, g, bucket] {
    const auto t0 = std::chrono::steady_clock::now();
    int64_t copied = 0;
    if (t->sharded()) {
      trainer::driven_pass(*t, [&](const nn::NamedTensors& unit) { copied += dist::send_weights(*g, unit).copied_bytes; });
    } else {
      const auto& params = t->policy().named_parameters();
      nn::NamedTensors sent;
      for (size_t i : send_order(params)) sent.push_back(params[i]);
      copied = dist::send_weights(*g, sent, bucket).copied_bytes;
    }
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return json{{"success", true}, {"seconds", dt}, {"copied_bytes", copied}};
  });
}

// shm_write(layout_json, buffer): the layout is what the engine's /init_weights_shm replied
int l_shm_write(lua_State* L) {
  TrainerBox& box = check_box(L, 1);
  const std::string text(arg::string(L, 2, "layout"));
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) throw ArgError(2, "layout", "JSON text expected");
  auto layout = std::make_shared<nn::SharedLayout>(nn::SharedLayout::from_json(j));
  const int64_t buffer = arg::integer(L, 3, "buffer");
  if (buffer < 0 || buffer >= layout->buffers)
    throw ArgError(3, "buffer", "0.." + std::to_string(layout->buffers - 1) + " expected, got " + std::to_string(buffer));
  auto t = box.trainer;
  auto shm = box.shm;
  std::shared_ptr<nn::LoraAdapter> adapter = wants_adapter(L, 4) ? adapter_of(L, box, 4) : nullptr;
  return start_job(L, box, [t, shm, layout, buffer, adapter] {
    const auto t0 = std::chrono::steady_clock::now();
    std::shared_ptr<nn::SharedWeightsWriter> w;
    {
      std::lock_guard lk(shm->mu);
      auto& slot = shm->by_id[layout->id];
      if (!slot) slot = std::make_shared<nn::SharedWeightsWriter>(*layout);
      w = slot;
    }
    if (adapter) w->write(static_cast<int>(buffer), adapter->named_parameters());
    else if (t->sharded()) trainer::driven_pass(*t, [&](const nn::NamedTensors& unit) { w->write_some(static_cast<int>(buffer), unit); });
    else w->write(static_cast<int>(buffer), t->policy().named_parameters());
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return json{{"success", true}, {"seconds", dt}};
  });
}

// follow_gathers() -> op: ranks other than 0 of a sharded trainer, while rank 0 syncs.
int l_follow_gathers(lua_State* L) {
  TrainerBox& box = check_box(L, 1);
  auto t = box.trainer;
  return start_job(L, box, [t] { return json{{"success", true}, {"passes", trainer::follow_passes(*t)}}; });
}

// gathers_done() -> op: rank 0's end of a sync (follow_gathers returns on the others).
int l_gathers_done(lua_State* L) {
  TrainerBox& box = check_box(L, 1);
  auto t = box.trainer;
  return start_job(L, box, [t] {
    trainer::passes_done(*t);
    return json{{"success", true}};
  });
}

// save_model(dir, dtype|nil, max_shard_bytes|nil, driven) -> op: the policy as a Hugging Face
// directory. Sharded: a collective (every rank calls it), gathered unit by unit and
// streamed into the files by rank 0 (the other ranks' dir is not written).
int l_save_model(lua_State* L) {
  TrainerBox& box = check_box(L, 1);
  const std::string dir(arg::string(L, 2, "dir"));
  auto dtype = box.trainer->policy().options().dtype;
  if (auto d = arg::opt_string(L, 3, "dtype")) dtype = nn::parse_dtype(std::string(*d));
  const auto shard = arg::opt_integer(L, 4, "max_shard_bytes");
  if (shard && *shard <= 0) throw ArgError(4, "max_shard_bytes", "a positive integer expected");
  const bool driven = lua_toboolean(L, 5);
  auto t = box.trainer;
  const size_t max_shard = shard ? static_cast<size_t>(*shard) : size_t(5) << 30;
  return start_job(L, box, [t, dir, dtype, max_shard, driven] {
    const auto t0 = std::chrono::steady_clock::now();
    trainer::save_policy(*t, dir, dtype, max_shard, driven);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return json{{"success", true}, {"seconds", dt}};
  });
}

int l_shm_forget(lua_State* L) {
  TrainerBox& box = check_box(L, 1);
  const std::string id(arg::string(L, 2, "id"));
  std::shared_ptr<nn::SharedWeightsWriter> gone;  // unmapped outside the lock
  {
    std::lock_guard lk(box.shm->mu);
    auto it = box.shm->by_id.find(id);
    if (it != box.shm->by_id.end()) {
      gone = std::move(it->second);
      box.shm->by_id.erase(it);
    }
  }
  return 0;
}

// Per sample, a list of numbers.
void push_rows(lua_State* L, const std::vector<std::vector<float>>& lps) {
  lua_createtable(L, static_cast<int>(lps.size()), 0);
  for (size_t i = 0; i < lps.size(); ++i) {
    lua_createtable(L, static_cast<int>(lps[i].size()), 0);
    for (size_t j = 0; j < lps[i].size(); ++j) {
      lua_pushnumber(L, lps[i][j]);
      lua_rawseti(L, -2, static_cast<int>(j + 1));
    }
    lua_rawseti(L, -2, static_cast<int>(i + 1));
  }
}

int l_response_logprobs(lua_State* L) {
  TrainerBox& box = check_box(L, 1);
  if (box.worker.is_busy()) throw ArgError(1, "trainer", "the trainer is busy with another train/sync/save/load call");
  auto batch = batch_arg(L, 2);
  box.trainer->validate(batch);
  push_rows(L, box.trainer->response_logprobs(batch));
  return 1;
}

int l_response_values(lua_State* L) {
  TrainerBox& box = check_box(L, 1);
  if (box.worker.is_busy()) throw ArgError(1, "trainer", "the trainer is busy with another train/sync/save/load call");
  if (!box.trainer->critic()) throw ArgError(1, "trainer", "values need a critic (rl.trainer.new{use_critic = true})");
  auto batch = batch_arg(L, 2);
  box.trainer->validate(batch);
  push_rows(L, box.trainer->response_values(batch));
  return 1;
}

json json_arg(lua_State* L, int idx, const char* name) {
  const std::string text(arg::opt_string(L, idx, name).value_or("{}"));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw ArgError(idx, name, "a JSON object expected");
  return j;
}

// save(root, iteration|nil, meta_json): meta = {options, extra, sources, weight_version, tokenizer_dir}
int l_save(lua_State* L) {
  TrainerBox& box = check_box(L, 1);
  const std::string root(arg::string(L, 2, "dir"));
  const auto iteration = arg::opt_integer(L, 3, "iteration");
  if (iteration && *iteration < 0) throw ArgError(3, "iteration", "a non-negative integer expected");
  const json meta = json_arg(L, 4, "meta");
  trainer::SaveRequest req;
  req.iteration = iteration.value_or(-1);
  req.options = meta.value("options", json::object());
  req.extra = meta.value("extra", json::object());
  req.sources = meta.value("sources", json::object());
  req.weight_version = meta.value("weight_version", std::string());
  req.tokenizer_dir = meta.value("tokenizer_dir", std::string());
  auto t = box.trainer;
  return start_job(L, box, [t, root, req = std::move(req)] {
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = trainer::save_checkpoint(*t, root, req);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return json{{"path", r.dir.string()}, {"iteration", r.iteration}, {"files", r.files}, {"seconds", dt}};
  });
}

// load(dir, weights=true): dir as checkpoint_resolve returned it
int l_load(lua_State* L) {
  TrainerBox& box = check_box(L, 1);
  const std::string dir(arg::string(L, 2, "dir"));
  const bool weights = lua_isnoneornil(L, 3) || lua_toboolean(L, 3);
  auto t = box.trainer;
  return start_job(L, box, [t, dir, weights] { return trainer::load_checkpoint(*t, dir, weights); });
}

// checkpoint_resolve(path) -> dir, trainer_state_json | nil, err (only small files are read)
int l_resolve(lua_State* L) {
  const std::string path(arg::string(L, 1, "path"));
  std::string dir, state;
  try {
    const auto d = trainer::resolve_checkpoint(path);
    state = trainer::read_trainer_state(d).dump();
    dir = d.string();
  } catch (const std::exception& e) {
    return fail(L, e.what());
  }
  lua_pushlstring(L, dir.data(), dir.size());
  lua_pushlstring(L, state.data(), state.size());
  return 2;
}

int l_default_options(lua_State* L) {
  const std::string s = trainer::trainer_options_to_json(trainer::TrainerOptions{}).dump();
  lua_pushlstring(L, s.data(), s.size());
  return 1;
}

int l_step(lua_State* L) {
  lua_pushnumber(L, static_cast<lua_Number>(check_box(L, 1).trainer->step()));
  return 1;
}

int l_lr(lua_State* L) {
  lua_pushnumber(L, check_box(L, 1).trainer->current_lr());
  return 1;
}

// done, total micro-batches of the running train() (read while it runs on the helper thread)
int l_progress(lua_State* L) {
  const auto [done, total] = check_box(L, 1).trainer->progress();
  lua_pushnumber(L, static_cast<lua_Number>(done));
  lua_pushnumber(L, static_cast<lua_Number>(total));
  return 2;
}

// lora() -> the trained LoRA adapter's handle (lora_rank > 0), or nil
int l_lora(lua_State* L) {
  const auto& a = check_box(L, 1).trainer->lora();
  if (!a) {
    lua_pushnil(L);
    return 1;
  }
  push_lora(L, a);
  return 1;
}

int l_set_cpus(lua_State* L) {
  TrainerBox& box = check_box(L, 1);
  if (lua_isnoneornil(L, 2)) {
    box.worker.cpus.clear();
    return 0;
  }
  box.worker.cpus = arg::cpu_list(L, 2, "list");
  return 0;
}

}  // namespace

void open_trainer(lua_State* L, int t) {
  static const Reg methods[] = {
      {"train", entry<l_train>}, {"sync", entry<l_sync>}, {"sync_lora", entry<l_sync_lora>}, {"response_logprobs", entry<l_response_logprobs>},
      {"response_values", entry<l_response_values>},
      {"step", entry<l_step>},   {"lr", entry<l_lr>},  {"progress", entry<l_progress>},
      {"save", entry<l_save>},   {"load", entry<l_load>},
      {"weight_meta", entry<l_weight_meta>}, {"group_connect", entry<l_group_connect>},
      {"send_weights", entry<l_send_weights>}, {"replica_digest", entry<l_replica_digest>}, {"shm_write", entry<l_shm_write>},
      {"shm_forget", entry<l_shm_forget>}, {"set_cpus", entry<l_set_cpus>},
      {"save_model", entry<l_save_model>}, {"follow_gathers", entry<l_follow_gathers>},
      {"gathers_done", entry<l_gathers_done>}, {"lora", entry<l_lora>},
  };
  make_metatable(L, &kTrainerMt, "rl.trainer.Trainer:", methods, std::size(methods), entry<destroy_udata<TrainerBox>>);
  static const Reg regs[] = {{"trainer_new", entry<l_new>}, {"checkpoint_resolve", entry<l_resolve>},
                             {"default_options", entry<l_default_options>}};
  register_functions(L, t, "rl.trainer.", regs);
}

}  // namespace rl::lua
