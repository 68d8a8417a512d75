#include "trainer/sharded_io.hpp"

#include <algorithm>
#include <cstdlib>

#include "base/errors.hpp"
#include "dist/dist.hpp"
#include "trainer/checkpoint.hpp"
#include "model/tensor_files.hpp"
#include "nn/weights.hpp"

namespace rl::trainer {

namespace {
constexpr const char* kPass = "pass";
constexpr const char* kDone = "done";
bool sharded_group(Trainer& t) { return t.sharded() && t.sharded()->world() > 1; }
}  // namespace

void driven_pass(Trainer& t, const std::function<void(const nn::NamedTensors&)>& fn) {
  if (sharded_group(t)) dist::default_group()->broadcast_bytes(kPass, 0);
  t.for_each_parameter_group(fn);
}

int follow_passes(Trainer& t) {
  int passes = 0;
  if (!sharded_group(t)) return passes;
  while (dist::default_group()->broadcast_bytes("", 0) == kPass) {
    t.for_each_parameter_group([](const nn::NamedTensors&) {});
    ++passes;
  }
  return passes;
}

void passes_done(Trainer& t) {
  if (sharded_group(t)) dist::default_group()->broadcast_bytes(kDone, 0);
}

void save_policy(Trainer& t, const std::filesystem::path& dir, torch::ScalarType dtype, size_t max_shard_bytes,
                 bool driven) {
  auto& m = t.policy();
  torch::NoGradGuard ng;
  auto* sm = t.sharded();
  if (!sm) return nn::save_model_dir(dir, m.config(), m.named_parameters(), dtype, max_shard_bytes);
  // Rank 0 lays the files out from the units' names and shapes, then writes each unit's
  // bytes as its gather completes: it holds one unit at a time, never the model.
  std::unique_ptr<model::SafetensorsStream> out;
  if (sm->rank() == 0) {
    std::vector<model::TensorSpec> specs;
    for (const auto& u : sm->units())
      for (size_t i = 0; i < u.names.size(); ++i) specs.push_back({u.names[i], nn::dtype_of(dtype), u.shapes[i]});
    std::filesystem::create_directories(dir);
    out = std::make_unique<model::SafetensorsStream>(dir, std::move(specs), max_shard_bytes);
  }
  // A write that fails (a full disk) stops the writing, not the gathers: the other
  // ranks are in them; the error is thrown once the pass is over.
  std::string failed;
  const auto each = [&](const nn::NamedTensors& unit) {
    if (!out) return;
    try {
      for (const auto& [name, w] : unit) {
        const auto c = w.to(torch::kCPU, dtype).contiguous();
        out->write(name, c.data_ptr(), static_cast<size_t>(c.nbytes()));
      }
    } catch (const std::exception& e) {
      failed = e.what();
      out.reset();  // its temporary files removed
    }
  };
  if (driven) driven_pass(t, each);
  else t.for_each_parameter_group(each);
  if (!failed.empty()) throw Error(failed);
  if (!out) return;
  out->finish();
  auto j = m.config().to_json();
  j["torch_dtype"] = nn::dtype_config_name(dtype);
  model::write_file_atomic(dir / "config.json", j.dump(2) + "\n");
}

}  // namespace rl::trainer

namespace rl::trainer {

namespace {

namespace fs = std::filesystem;
constexpr const char* kShardFormat = "rlhost-adamw-sharded-1";

std::string ukey(const char* what, size_t u) { return std::string(what) + "/" + std::to_string(u); }

// One file's (or the replicated file's) state of unit u over [begin, end).
struct Piece {
  int64_t begin = 0, end = 0, step = 0;
  torch::Tensor exp_avg, exp_avg_sq;  // [end - begin]
};

std::vector<std::string> unit_order_names(const std::vector<ShardedModel::Unit>& units) {
  std::vector<std::string> out;
  for (const auto& u : units) out.insert(out.end(), u.names.begin(), u.names.end());
  return out;
}

// The units of a model as a sharded trainer lays them out (names, sizes), for readers
// that are not sharded themselves.
struct Layout {
  std::vector<std::vector<std::string>> names;
  std::vector<std::vector<int64_t>> sizes;  // per parameter numel
  std::vector<int64_t> numel;               // per unit
};

Layout layout_of(const nn::Transformer& m) {
  Layout l;
  const auto& params = m.named_parameters();
  for (const auto& idx : m.parameter_units()) {
    l.names.emplace_back();
    l.sizes.emplace_back();
    int64_t n = 0;
    for (size_t i : idx) {
      l.names.back().push_back(params[i].first);
      l.sizes.back().push_back(params[i].second.numel());
      n += params[i].second.numel();
    }
    l.numel.push_back(n);
  }
  return l;
}

// Reads one shard file: per unit its piece (none before the first step), checked
// against the layout.
std::vector<std::optional<Piece>> read_shard_file(const fs::path& file, const Layout& l) {
  const std::string where = file.string();
  torch::serialize::InputArchive ar;
  const auto names = open_archive(ar, file, kShardFormat, "sharded optimizer");
  std::vector<std::string> mine;
  for (const auto& u : l.names) mine.insert(mine.end(), u.begin(), u.end());
  if (names != mine)
    throw Error(where + ": the optimizer state is of another model (" + std::to_string(names.size()) +
                    " parameters, the trainer's model has " + std::to_string(mine.size()) + " or other names)",
                "resume with the model the checkpoint was saved from");
  std::vector<std::optional<Piece>> out(l.numel.size());
  for (size_t u = 0; u < l.numel.size(); ++u) {
    torch::Tensor range, step;
    if (!ar.try_read(ukey("range", u), range) || range.numel() != 2)
      throw Error(where + ": unit " + std::to_string(u) + " has no range", "the file is damaged");
    Piece p;
    p.begin = range[0].item<int64_t>();
    p.end = range[1].item<int64_t>();
    if (p.begin < 0 || p.end < p.begin || p.end > l.numel[u])
      throw Error(where + ": unit " + std::to_string(u) + " range [" + std::to_string(p.begin) + ", " +
                  std::to_string(p.end) + ") is outside its " + std::to_string(l.numel[u]) + " parameters");
    if (!ar.try_read(ukey("step", u), step)) continue;
    p.step = step.item<int64_t>();
    ar.read(ukey("exp_avg", u), p.exp_avg);
    ar.read(ukey("exp_avg_sq", u), p.exp_avg_sq);
    if (p.exp_avg.numel() != p.end - p.begin || p.exp_avg_sq.numel() != p.end - p.begin)
      throw Error(where + ": unit " + std::to_string(u) + " state does not match its range", "the file is damaged");
    out[u] = std::move(p);
  }
  return out;
}

// Copies the overlap of `src` (a piece of unit space) into dst, which covers [b, e).
void copy_overlap(const Piece& src, int64_t b, int64_t e, torch::Tensor& dst_avg, torch::Tensor& dst_sq) {
  const int64_t lo = std::max(b, src.begin), hi = std::min(e, src.end);
  if (hi <= lo) return;
  dst_avg.narrow(0, lo - b, hi - lo).copy_(src.exp_avg.narrow(0, lo - src.begin, hi - lo));
  dst_sq.narrow(0, lo - b, hi - lo).copy_(src.exp_avg_sq.narrow(0, lo - src.begin, hi - lo));
}

// Per unit, the state over [0, numel) of a replicated optimizer.pt (one piece per unit).
std::vector<std::optional<Piece>> pieces_from_replicated(const fs::path& file, const nn::Transformer& m) {
  const auto slots = read_optimizer_state(file, m.named_parameters());
  std::vector<std::optional<Piece>> out;
  for (const auto& idx : m.parameter_units()) {
    Piece p;
    std::vector<torch::Tensor> a, s;
    bool any = false;
    for (size_t i : idx) {
      const auto n = m.named_parameters()[i].second.numel();
      if (slots[i]) {
        any = true;
        p.step = slots[i]->step;
        a.push_back(slots[i]->exp_avg.reshape({-1}).to(torch::kCPU));
        s.push_back(slots[i]->exp_avg_sq.reshape({-1}).to(torch::kCPU));
      } else {
        a.push_back(torch::zeros({n}));
        s.push_back(torch::zeros({n}));
      }
      p.end += n;
    }
    if (!any) {
      out.emplace_back();
      continue;
    }
    p.exp_avg = torch::cat(a);
    p.exp_avg_sq = torch::cat(s);
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

std::string sharded_optimizer_file(int rank, int world) {
  return "optimizer.shard_" + std::to_string(rank) + "_of_" + std::to_string(world) + ".pt";
}

void write_sharded_optimizer(Trainer& t, const fs::path& dir) {
  auto* sm = t.sharded();
  if (!sm) throw std::logic_error("write_sharded_optimizer: the trainer is not sharded");
  torch::serialize::OutputArchive ar;
  c10::List<std::string> names;
  for (const auto& n : unit_order_names(sm->units())) names.push_back(n);
  ar.write("format", c10::IValue(std::string(kShardFormat)));
  ar.write("names", c10::IValue(names));
  ar.write("world_size", c10::IValue(static_cast<int64_t>(sm->world())));
  ar.write("rank", c10::IValue(static_cast<int64_t>(sm->rank())));
  const auto& state = t.optimizer().state();
  const auto shards = sm->shards();
  for (size_t u = 0; u < shards.size(); ++u) {
    const auto [b, e] = sm->range(u);
    ar.write(ukey("range", u), torch::tensor({b, e}, torch::kInt64));
    auto it = state.find(shards[u].unsafeGetTensorImpl());
    if (it == state.end()) continue;
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
    ar.write(ukey("step", u), torch::tensor(s.step(), torch::kInt64));
    ar.write(ukey("exp_avg", u), s.exp_avg().narrow(0, 0, e - b).to(torch::kCPU).contiguous());
    ar.write(ukey("exp_avg_sq", u), s.exp_avg_sq().narrow(0, 0, e - b).to(torch::kCPU).contiguous());
  }
  save_archive_synced(ar, dir / sharded_optimizer_file(sm->rank(), sm->world()));
}

int sharded_optimizer_world(const fs::path& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string n = entry.path().filename().string();
    const std::string head = "optimizer.shard_0_of_";
    if (n.rfind(head, 0) == 0 && n.size() > head.size() + 3 && n.substr(n.size() - 3) == ".pt")
      return std::atoi(n.substr(head.size(), n.size() - head.size() - 3).c_str());
  }
  return 0;
}

void load_sharded_optimizer(Trainer& t, const fs::path& dir) {
  auto* sm = t.sharded();
  if (!sm) throw std::logic_error("load_sharded_optimizer: the trainer is not sharded");
  const Layout l = layout_of(t.policy());
  const auto shards = sm->shards();
  // This rank's state, per unit, built from whatever pieces cover its range.
  std::vector<std::optional<Piece>> mine(shards.size());
  auto take = [&](const std::vector<std::optional<Piece>>& pieces) {
    for (size_t u = 0; u < shards.size(); ++u) {
      if (!pieces[u]) continue;
      const auto [b, e] = sm->range(u);
      auto& m = mine[u];
      if (!m) {
        m = Piece{b, e, pieces[u]->step, torch::zeros({shards[u].numel()}), torch::zeros({shards[u].numel()})};
      }
      copy_overlap(*pieces[u], b, e, m->exp_avg, m->exp_avg_sq);
    }
  };
  if (const int world = sharded_optimizer_world(dir); world > 0) {
    for (int r = 0; r < world; ++r) {  // one file in memory at a time
      const fs::path f = dir / sharded_optimizer_file(r, world);
      if (!fs::exists(f)) throw Error(f.string() + ": missing (a sharded checkpoint of " + std::to_string(world) +
                                      " ranks)", "the checkpoint is damaged; load an earlier iter_* directory");
      take(read_shard_file(f, l));
    }
  } else {
    take(pieces_from_replicated(dir / kOptimizerFile, t.policy()));
  }
  auto& state = t.optimizer().state();
  state.clear();
  for (size_t u = 0; u < shards.size(); ++u) {
    if (!mine[u]) continue;
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    s->step(mine[u]->step);
    s->exp_avg(mine[u]->exp_avg.to(shards[u].device(), shards[u].scalar_type()));
    s->exp_avg_sq(mine[u]->exp_avg_sq.to(shards[u].device(), shards[u].scalar_type()));
    state[shards[u].unsafeGetTensorImpl()] = std::move(s);
  }
}

std::vector<std::optional<AdamWSlot>> read_sharded_optimizer_whole(const fs::path& dir, const nn::Transformer& m) {
  const int world = sharded_optimizer_world(dir);
  const Layout l = layout_of(m);
  std::vector<std::optional<Piece>> whole(l.numel.size());
  for (int r = 0; r < world; ++r) {
    const fs::path f = dir / sharded_optimizer_file(r, world);
    if (!fs::exists(f)) throw Error(f.string() + ": missing (a sharded checkpoint of " + std::to_string(world) +
                                    " ranks)", "the checkpoint is damaged; load an earlier iter_* directory");
    const auto pieces = read_shard_file(f, l);
    for (size_t u = 0; u < pieces.size(); ++u) {
      if (!pieces[u]) continue;
      if (!whole[u]) whole[u] = Piece{0, l.numel[u], pieces[u]->step, torch::zeros({l.numel[u]}), torch::zeros({l.numel[u]})};
      copy_overlap(*pieces[u], 0, l.numel[u], whole[u]->exp_avg, whole[u]->exp_avg_sq);
    }
  }
  const auto& params = m.named_parameters();
  const auto units = m.parameter_units();
  std::vector<std::optional<AdamWSlot>> slots(params.size());
  for (size_t u = 0; u < units.size(); ++u) {
    if (!whole[u]) continue;
    int64_t off = 0;
    for (size_t j = 0; j < units[u].size(); ++j) {
      const auto& p = params[units[u][j]].second;
      AdamWSlot s;
      s.step = whole[u]->step;
      s.exp_avg = whole[u]->exp_avg.narrow(0, off, p.numel()).view(p.sizes()).to(p.device(), p.scalar_type()).clone();
      s.exp_avg_sq = whole[u]->exp_avg_sq.narrow(0, off, p.numel()).view(p.sizes()).to(p.device(), p.scalar_type()).clone();
      slots[units[u][j]] = std::move(s);
      off += p.numel();
    }
  }
  return slots;
}

void load_sharded_weights(Trainer& t, const model::TensorSet& tensors) {
  auto* sm = t.sharded();
  if (!sm) throw std::logic_error("load_sharded_weights: the trainer is not sharded");
  sm->load(tensors);
  t.policy().weights_changed();
}

}  // namespace rl::trainer
