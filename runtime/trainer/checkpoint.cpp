// Trainer checkpoints: the directory layout, the atomic save protocol, and the
// checked resume (checkpoint.hpp; the format is described in docs/trainer.md).
#include "trainer/checkpoint.hpp"
#include "nn/lora.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <thread>

#include <zlib.h>

#include "base/errors.hpp"
#include "model/tensor_files.hpp"
#include "nn/weights.hpp"
#include "dist/dist.hpp"
#include "trainer/checkpoint_state.hpp"
#include "trainer/sharded_io.hpp"

namespace rl::trainer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kFormatName = "rlhost-trainer-checkpoint";
constexpr int kFormatVersion = 1;
constexpr const char* kLoadHint =
    "--load takes the --save directory (with latest_checkpointed_iteration.txt) or one of its iter_* directories";
constexpr const char* kDamagedHint = "the checkpoint is damaged; load an earlier iter_* directory";

// CRC-32 (zlib's) of a file's bytes, as "crc32:xxxxxxxx"; nullopt when unreadable.
// trainer_state.json records one per file, so a copy whose bytes changed (bit rot, a
// bad transfer, an edit) is caught at load, not just one whose size changed.
std::optional<std::string> file_crc32(const fs::path& f) {
  std::ifstream in(f, std::ios::binary);
  if (!in) return std::nullopt;
  uLong crc = crc32(0L, Z_NULL, 0);
  std::vector<char> buf(size_t(1) << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto n = in.gcount();
    if (n > 0) crc = crc32(crc, reinterpret_cast<const Bytef*>(buf.data()), static_cast<uInt>(n));
  }
  if (in.bad()) return std::nullopt;
  char out[24];
  std::snprintf(out, sizeof out, "crc32:%08lx", static_cast<unsigned long>(crc));
  return std::string(out);
}

// What a Hugging Face model directory carries besides config and weights; copied
// so that the saved directory is a complete model for transformers and engines.
constexpr const char* kTokenizerFiles[] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "vocab.json",     "merges.txt",            "tokenizer.model",         "chat_template.jinja",
    "generation_config.json",
};

// Test-only: RLHOST_CHECKPOINT_TEST_PAUSE="<stage>:<seconds>" sleeps at `stage` —
// "files" (model and tokenizer written, optimizer.pt not yet) or "swap" (the old
// iter_N moved aside, the new one not yet renamed in) — so a test can SIGKILL the
// process there (tests/lua/trainer_checkpoint_spec.lua).
void test_pause(const char* stage) {
  const char* env = std::getenv("RLHOST_CHECKPOINT_TEST_PAUSE");
  if (!env) return;
  const std::string s(env);
  const auto colon = s.find(':');
  if (colon == std::string::npos || s.compare(0, colon, stage) != 0) return;
  std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(s.c_str() + colon + 1)));
}

void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_errno(dir.string() + ": cannot open to fsync");
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw_errno(dir.string() + ": fsync failed");
}

void write_synced(const fs::path& file, std::string_view bytes) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_errno(file.string() + ": cannot create");
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t w = ::write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      const int e = errno;
      ::close(fd);
      errno = e;
      throw_errno(file.string() + ": write failed");
    }
    p += w;
    left -= size_t(w);
  }
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    throw_errno(file.string() + ": fsync failed");
  }
  if (::close(fd) != 0) throw_errno(file.string() + ": close failed");
}

std::optional<std::string> read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void rename_or_throw(const fs::path& from, const fs::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) throw_errno("cannot rename " + from.string() + " to " + to.string());
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return c >= '0' && c <= '9'; });
}

bool pid_alive(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

// "iter_0000004.tmp-123" → {"iter_0000004", "tmp", 123}: what a save of process 123
// leaves while it runs (or when it was killed).
struct Leftover {
  std::string base, kind;
  pid_t pid = 0;
};
std::optional<Leftover> parse_leftover(const std::string& name) {
  const auto dot = name.rfind('.');
  if (dot == std::string::npos) return std::nullopt;
  const std::string base = name.substr(0, dot), rest = name.substr(dot + 1);
  if (base.rfind("iter_", 0) != 0 && base != kLatestFile) return std::nullopt;
  for (const char* kind : {"tmp-", "old-"}) {
    if (rest.rfind(kind, 0) != 0) continue;
    const std::string digits = rest.substr(4);
    if (!all_digits(digits) || digits.size() > 9) return std::nullopt;
    return Leftover{base, std::string(kind, 3), static_cast<pid_t>(std::stol(digits))};
  }
  return std::nullopt;
}

// The two models must agree on every shape-defining field; names the first difference.
void check_same_model(const model::ModelConfig& saved, const model::ModelConfig& mine, const fs::path& file) {
  auto differ = [&](const std::string& field, const std::string& a, const std::string& b) {
    if (a == b) return;
    throw Error(file.string() + ": the checkpoint is for another model: " + field + " " + a +
                    ", the trainer's model has " + b,
                "resume with the model it was saved from (rl.trainer.load(dir) without opts.model uses the "
                "checkpoint's own)");
  };
  differ("architecture", saved.architecture, mine.architecture);
  differ("vocab_size", std::to_string(saved.vocab_size), std::to_string(mine.vocab_size));
  differ("hidden_size", std::to_string(saved.hidden_size), std::to_string(mine.hidden_size));
  differ("intermediate_size", std::to_string(saved.intermediate_size), std::to_string(mine.intermediate_size));
  differ("num_hidden_layers", std::to_string(saved.num_hidden_layers), std::to_string(mine.num_hidden_layers));
  differ("num_attention_heads", std::to_string(saved.num_attention_heads), std::to_string(mine.num_attention_heads));
  differ("num_key_value_heads", std::to_string(saved.num_key_value_heads), std::to_string(mine.num_key_value_heads));
  differ("head_dim", std::to_string(saved.head_dim), std::to_string(mine.head_dim));
  const auto flag = [](bool b) { return std::string(b ? "true" : "false"); };
  differ("tie_word_embeddings", flag(saved.tie_word_embeddings), flag(mine.tie_word_embeddings));
}

// A sharded trainer's ranks save together: `fn` runs on every rank, then they agree
// on the outcome, so that a rank that failed (a full disk) fails the save on all of
// them at the same point instead of leaving the others in a collective.
void agree(Trainer& t, const std::function<void()>& fn, const std::string& what) {
  std::string err;
  try {
    fn();
  } catch (const std::exception& e) {
    err = e.what();
  }
  auto* sm = t.sharded();
  if (!sm || sm->world() == 1) {
    if (!err.empty()) throw Error(err);
    return;
  }
  auto g = dist::default_group();
  std::vector<torch::Tensor> v{torch::zeros({sm->world()}, torch::kFloat64)};
  v[0][sm->rank()] = err.empty() ? 0.0 : 1.0;
  g->allreduce_sum(v, "the checkpoint's status (" + what + ")");
  if (!err.empty()) throw Error("checkpoint: " + what + ": " + err);
  for (int r = 0; r < sm->world(); ++r)
    if (v[0][r].item<double>() > 0)
      throw Error("checkpoint: " + what + ": rank " + std::to_string(r) + " failed (its log says why)",
                  "fix that rank's disk or path and save again; the previous checkpoint is untouched");
}

// Writes everything into `dir` (a fresh temporary directory); returns the file names.
std::vector<std::string> write_contents(Trainer& t, const fs::path& dir, const SaveRequest& req, int64_t iteration) {
  auto& m = t.policy();
  if (t.sharded() && !t.lora()) {
    // Every rank: the model gathered unit by unit (rank 0 writes it) and its own AdamW
    // shard; a failure anywhere fails the save on every rank at the same point.
    agree(t, [&] { save_policy(t, dir, m.options().dtype, size_t(5) << 30); }, "writing the model");
    agree(t, [&] { write_sharded_optimizer(t, dir); }, "writing the optimizer shards");
    if (t.sharded()->rank() != 0) return {};
  } else if (t.lora()) {
    // LoRA: the base is frozen (its source is in trainer_state.json's sources): the
    // adapter as PEFT files, and config.json to check the base's shape against on load.
    // Over a sharded base the adapter is replicated: rank 0 writes it.
    if (t.sharded() && t.sharded()->rank() != 0) return {};
    torch::NoGradGuard ng;
    auto cfg = m.config().to_json();
    write_synced(dir / "config.json", cfg.dump(2) + "\n");
    const auto src = req.sources.is_object() ? req.sources.find("model") : req.sources.end();
    nn::save_peft_adapter(*t.lora(), dir, src != req.sources.end() && src->is_string() ? src->get<std::string>() : "");
  } else {
    torch::NoGradGuard ng;
    nn::save_model_dir(dir, m.config(), m.named_parameters(), m.options().dtype, size_t(5) << 30);
  }
  if (!req.tokenizer_dir.empty()) {
    for (const char* name : kTokenizerFiles) {
      std::error_code ec;
      if (!fs::is_regular_file(req.tokenizer_dir / name, ec)) continue;
      auto bytes = read_text(req.tokenizer_dir / name);
      if (!bytes) throw Error((req.tokenizer_dir / name).string() + ": cannot read");
      write_synced(dir / name, *bytes);
    }
  }
  test_pause("files");
  if (t.lora()) write_optimizer_state(t.optimizer(), t.lora()->named_parameters(), dir / kOptimizerFile);
  else if (!t.sharded()) write_optimizer_state(t.optimizer(), m.named_parameters(), dir / kOptimizerFile);
  if (t.critic()) save_critic(*t.critic(), dir);

  json files = json::object(), checksums = json::object();
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    const std::string name = entry.path().filename().string();
    files[name] = static_cast<uint64_t>(entry.file_size());
    auto sum = file_crc32(entry.path());
    if (!sum) throw Error(entry.path().string() + ": cannot read back what was just written");
    checksums[name] = *sum;
    names.push_back(name);
  }
  json st;
  st["format"] = kFormatName;
  st["format_version"] = kFormatVersion;
  st["iteration"] = iteration;
  st["step"] = t.step();
  st["next_lr"] = t.current_lr();
  st["weight_version"] = req.weight_version.empty() ? std::to_string(t.step()) : req.weight_version;
  st["dtype"] = nn::dtype_config_name(m.options().dtype);
  st["options"] = req.options;
  st["sources"] = req.sources;
  st["extra"] = req.extra;
  st["rng"] = rng_state_json();
  if (t.critic()) st["critic"] = {{"step", t.critic_progress().step}, {"rollouts", t.critic_progress().rollouts}};
  if (t.lora()) st["lora"] = true;  // the weights are the adapter's (PEFT files), not the model's
  st["files"] = files;  // sizes: a truncated copy is caught before anything is parsed
  st["checksums"] = checksums;  // and a changed byte, before anything is loaded
  st["saved_at"] = static_cast<int64_t>(std::time(nullptr));
  write_synced(dir / kStateFile, st.dump(2) + "\n");
  names.push_back(kStateFile);
  fsync_dir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

std::string iteration_dir_name(int64_t iteration) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "iter_%07lld", static_cast<long long>(iteration));
  return buf;
}

void recover_interrupted_saves(const fs::path& root) {
  std::error_code ec;
  std::vector<std::pair<fs::path, Leftover>> found;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    auto lo = parse_leftover(entry.path().filename().string());
    if (!lo || (lo->pid != ::getpid() && pid_alive(lo->pid))) continue;
    found.emplace_back(entry.path(), *lo);
  }
  bool changed = false;
  for (const auto& [path, lo] : found) {
    const fs::path original = root / lo.base;
    if (lo.kind == "old" && !fs::exists(original, ec)) {
      rename_or_throw(path, original);  // killed between its two renames: put the previous one back
    } else {
      fs::remove_all(path, ec);
    }
    changed = true;
  }
  if (changed) fsync_dir(root);
}

namespace {

// Sharded trainers save together: rank 0 runs the protocol below and names the
// temporary directory on the group ("dir:<path>"); the other ranks write their parts
// into it (a directory every rank can reach: one machine, or a shared filesystem),
// then learn the outcome ("ok", or "err:<why>").
std::shared_ptr<dist::ProcessGroup> save_group(Trainer& t) {
  return t.sharded() && t.sharded()->world() > 1 ? dist::default_group() : nullptr;
}

SaveResult save_checkpoint_here(Trainer& t, const fs::path& root, const SaveRequest& req, bool* announced);

}  // namespace

SaveResult save_checkpoint(Trainer& t, const fs::path& root, const SaveRequest& req) {
  const auto g = save_group(t);
  bool announced = false;
  if (!g) return save_checkpoint_here(t, root, req, &announced);
  const int64_t iteration = req.iteration >= 0 ? req.iteration : t.step();
  if (g->rank() == 0) {
    std::string err;
    SaveResult r;
    try {
      r = save_checkpoint_here(t, root, req, &announced);
    } catch (const std::exception& e) {
      err = e.what();
    }
    if (!announced) g->broadcast_bytes("err:" + err, 0);
    else g->broadcast_bytes(err.empty() ? "ok" : "err:" + err, 0);
    if (!err.empty()) throw Error(err);
    return r;
  }
  const std::string where = g->broadcast_bytes("", 0);
  if (where.rfind("dir:", 0) != 0)
    throw Error("checkpoint: rank 0 could not start the save: " + where.substr(4));
  write_contents(t, where.substr(4), req, iteration);
  const std::string outcome = g->broadcast_bytes("", 0);
  if (outcome != "ok") throw Error("checkpoint: rank 0 could not finish the save: " + outcome.substr(4));
  SaveResult r;
  r.dir = root / iteration_dir_name(iteration);
  r.iteration = iteration;
  return r;
}

namespace {

SaveResult save_checkpoint_here(Trainer& t, const fs::path& root, const SaveRequest& req, bool* announced) {
  const int64_t iteration = req.iteration >= 0 ? req.iteration : t.step();
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) throw Error(root.string() + ": cannot create the checkpoint directory (" + ec.message() + ")");
  recover_interrupted_saves(root);

  const std::string name = iteration_dir_name(iteration), pid = std::to_string(::getpid());
  const fs::path final_dir = root / name, tmp = root / (name + ".tmp-" + pid), old = root / (name + ".old-" + pid);
  // Removes the temp directory on any failure before it is published.
  struct TempDir {
    fs::path path;
    ~TempDir() {
      std::error_code e;
      if (!path.empty()) fs::remove_all(path, e);
    }
  } guard{tmp};
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec) || ec)
    throw Error(tmp.string() + ": cannot create (" + (ec ? ec.message() : std::string("exists")) + ")");

  if (const auto g = save_group(t)) {
    g->broadcast_bytes("dir:" + tmp.string(), 0);
    *announced = true;
  }
  SaveResult r;
  r.dir = final_dir;
  r.iteration = iteration;
  r.files = write_contents(t, tmp, req, iteration);

  // Publish: at every instant a complete iter_N exists under its name or, in the
  // window between the two renames, as iter_N.old-<pid> (resolve_checkpoint and
  // recover_interrupted_saves know that name).
  if (fs::exists(final_dir, ec)) {
    rename_or_throw(final_dir, old);
    test_pause("swap");
    if (::rename(tmp.c_str(), final_dir.c_str()) != 0) {
      const int e = errno;
      ::rename(old.c_str(), final_dir.c_str());
      errno = e;
      throw_errno("cannot rename " + tmp.string() + " to " + final_dir.string());
    }
    guard.path.clear();
    fsync_dir(root);
    fs::remove_all(old, ec);
  } else {
    rename_or_throw(tmp, final_dir);
    guard.path.clear();
    fsync_dir(root);
  }

  // The pointer moves only once the directory it names is complete and durable.
  const fs::path latest = root / kLatestFile, latest_tmp = root / (std::string(kLatestFile) + ".tmp-" + pid);
  write_synced(latest_tmp, std::to_string(iteration) + "\n");
  rename_or_throw(latest_tmp, latest);
  fsync_dir(root);
  return r;
}

}  // namespace

fs::path resolve_checkpoint(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(path.string() + ": no such checkpoint directory", kLoadHint);
  if (!fs::is_directory(path, ec)) throw Error(path.string() + ": not a directory", kLoadHint);
  if (fs::exists(path / kStateFile, ec)) return path;
  const fs::path latest = path / kLatestFile;
  const auto text = read_text(latest);
  if (!text)
    throw Error(path.string() + ": not a checkpoint (no " + kStateFile + ", no " + kLatestFile + ")",
                std::string(kLoadHint) + "; an iter_* directory without trainer_state.json is an unfinished save");
  std::string s = *text;
  s.erase(std::remove_if(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c); }), s.end());
  if (s.size() > 15 || !all_digits(s))
    throw Error(latest.string() + ": '" + s.substr(0, 40) + "' is not an iteration number",
                "it holds the last saved iteration (e.g. 4); point --load at an iter_* directory instead");
  const fs::path dir = path / iteration_dir_name(std::stoll(s));
  if (fs::exists(dir / kStateFile, ec)) return dir;
  // Killed between the two renames of a save of the same iteration: the previous
  // copy is complete under its aside name.
  const std::string want = dir.filename().string();
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    auto lo = parse_leftover(entry.path().filename().string());
    if (lo && lo->kind == "old" && lo->base == want && fs::exists(entry.path() / kStateFile, ec)) return entry.path();
  }
  throw Error(dir.string() + ": missing or incomplete (no " + kStateFile + "), though " + kLatestFile +
                  " names iteration " + s,
              "was it removed or copied partially? point --load at another iter_* directory");
}

json read_trainer_state(const fs::path& dir) {
  const fs::path file = dir / kStateFile;
  const auto text = read_text(file);
  if (!text) throw Error(file.string() + ": cannot read", kLoadHint);
  json st = json::parse(*text, nullptr, false);
  if (st.is_discarded() || !st.is_object())
    throw Error(file.string() + ": not valid JSON (" + std::to_string(text->size()) + " bytes)", kDamagedHint);
  const json format = st.value("format", json(nullptr));
  if (!format.is_string() || format.get<std::string>() != kFormatName)
    throw Error(file.string() + ": not an rlhost trainer checkpoint (format " + format.dump() + ", expected '" +
                kFormatName + "')");
  const json version = st.value("format_version", json(nullptr));
  if (!version.is_number_integer() || version.get<int64_t>() != kFormatVersion)
    throw Error(file.string() + ": format version " + version.dump() +
                    ", this rlhost reads version " + std::to_string(kFormatVersion),
                "use the rlhost that wrote it");
  // Integral numbers may come back as floats from a JSON round trip through Lua.
  const auto whole = [](const json& v) {
    return v.is_number() && v.get<double>() >= 0 && v.get<double>() == std::floor(v.get<double>());
  };
  if (!st.contains("step") || !whole(st["step"]))
    throw Error(file.string() + ": 'step' is missing or not a non-negative integer", kDamagedHint);
  if (!st.contains("files") || !st["files"].is_object())
    throw Error(file.string() + ": 'files' is missing", kDamagedHint);
  for (const auto& [name, size] : st["files"].items()) {
    const fs::path f = dir / name;
    std::error_code ec;
    const auto actual = fs::file_size(f, ec);
    if (ec) throw Error(f.string() + ": missing (listed in " + kStateFile + ")", kDamagedHint);
    if (!whole(size) || actual != static_cast<uint64_t>(size.get<double>()))
      throw Error(f.string() + ": " + std::to_string(actual) + " bytes, " + kStateFile + " says " + size.dump() +
                      " (truncated or replaced)",
                  kDamagedHint);
  }
  // Checksums (checkpoints written before them have none): every listed file's bytes.
  if (st.contains("checksums")) {
    if (!st["checksums"].is_object()) throw Error(file.string() + ": 'checksums' is not an object", kDamagedHint);
    for (const auto& [name, want] : st["checksums"].items()) {
      if (!st["files"].contains(name) || !want.is_string())
        throw Error(file.string() + ": bad checksum entry for '" + name + "'", kDamagedHint);
      const auto got = file_crc32(dir / name);
      if (!got) throw Error((dir / name).string() + ": cannot read", kDamagedHint);
      if (*got != want.get<std::string>())
        throw Error((dir / name).string() + ": its bytes changed since the save (" + *got + ", " + kStateFile +
                        " says " + want.get<std::string>() + ")",
                    kDamagedHint);
    }
  }
  return st;
}

json load_checkpoint(Trainer& t, const fs::path& dir, bool weights) {
  json st = read_trainer_state(dir);
  auto& m = t.policy();
  check_same_model(model::ModelConfig::load(dir), m.config(), dir / "config.json");
  const bool saved_lora = st.value("lora", false);
  if (saved_lora != static_cast<bool>(t.lora()))
    throw Error(dir.string() + ": " +
                (saved_lora ? "a LoRA checkpoint (adapter_model.safetensors, no model weights) for a trainer without "
                              "lora_rank; resume with the checkpoint's options (rl.trainer.load) or set lora_rank"
                            : "a full-model checkpoint for a LoRA trainer (lora_rank > 0); resume it without LoRA, or "
                              "start the LoRA run from its model directory"));
  if (t.lora()) {
    // The adapter (shape and config checked against the trainer's) and its AdamW state.
    auto saved = nn::load_peft_adapter(dir, m.config());
    const auto &want = t.lora()->config(), &got = saved->config();
    if (got.rank != want.rank || got.alpha != want.alpha || got.targets != want.targets || got.lm_head != want.lm_head)
      throw Error((dir / "adapter_config.json").string() + ": r / lora_alpha / target_modules differ from the "
                  "trainer's lora_rank / lora_alpha / target_modules");
    auto slots = read_optimizer_state(dir / kOptimizerFile, t.lora()->named_parameters());
    const auto rng = parse_rng_state(st.value("rng", json(nullptr)), (dir / kStateFile).string());
    {
      torch::NoGradGuard ng;
      const auto& dst = t.lora()->named_parameters();
      const auto& src = saved->named_parameters();
      for (size_t i = 0; i < dst.size(); ++i) dst[i].second.copy_(src[i].second);
    }
    apply_optimizer_state(t.optimizer(), t.lora()->named_parameters(), std::move(slots));
    t.set_step(static_cast<int64_t>(st["step"].get<double>()));
    rng.apply();
    return st;
  }
  model::TensorSet tensors;
  if (weights) {
    tensors = model::read_safetensors_dir(dir);
    model::validate_tensors(tensors, m.config());
  }
  const auto rng = parse_rng_state(st.value("rng", json(nullptr)), (dir / kStateFile).string());
  if (t.sharded()) {
    // Each rank reads the ranges it holds, from shard files of any world size or a
    // replicated optimizer.pt (sharded_io.hpp).
    if (weights) load_sharded_weights(t, tensors);
    load_sharded_optimizer(t, dir);
    t.set_step(static_cast<int64_t>(st["step"].get<double>()));
    rng.apply();
    return st;
  }
  // A replicated trainer reads a sharded checkpoint's optimizer too (every shard file).
  auto slots = sharded_optimizer_world(dir) > 0 ? read_sharded_optimizer_whole(dir, m)
                                                : read_optimizer_state(dir / kOptimizerFile, m.named_parameters());
  std::optional<CriticRestore> critic;
  CriticProgress progress;
  if (t.critic()) {
    critic = read_critic(*t.critic(), dir);
    const json c = st.value("critic", json::object());
    progress.step = c.value("step", int64_t(0));
    progress.rollouts = c.value("rollouts", int64_t(0));
  }

  // Everything read and checked: from here on nothing is expected to fail.
  if (weights) m.load(tensors);
  apply_optimizer_state(t.optimizer(), m.named_parameters(), std::move(slots));
  if (critic) {
    critic->apply(*t.critic());
    t.set_critic_progress(progress);
  }
  t.set_step(static_cast<int64_t>(st["step"].get<double>()));
  rng.apply();
  return st;
}

}  // namespace rl::trainer
