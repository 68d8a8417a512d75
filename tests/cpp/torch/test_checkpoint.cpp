// runtime/trainer checkpoints below the Lua API: base64, the AdamW archive and
// generator states round-trip exactly, a checkpoint of another model is refused
// before anything changes, and leftovers of killed saves are cleaned up (the
// kill itself is tested end to end in tests/lua/trainer_checkpoint_spec.lua), and a
// save the kernel refuses part-way (RLIMIT_FSIZE: EFBIG while optimizer.pt is written)
// throws an error naming the file instead of aborting the process, leaving the last
// good checkpoint as it was (a full filesystem: tests/e2e/test_run_ends.py).
#include <torch/torch.h>

#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "model_fixtures.hpp"
#include "nn/transformer.hpp"
#include "trainer/checkpoint.hpp"
#include "trainer/checkpoint_state.hpp"

using namespace rl;
using namespace rl::trainer;
namespace fs = std::filesystem;

namespace {

struct TempRoot {
  fs::path path;
  TempRoot() {
    path = fs::temp_directory_path() / ("rlhost-ckpt-test-" + std::to_string(::getpid()) + "-" +
                                        std::to_string(reinterpret_cast<uintptr_t>(this)));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempRoot() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::shared_ptr<Trainer> tiny_trainer(const std::string& family, uint64_t seed) {
  auto m = std::make_shared<nn::Transformer>(test::tiny_config(family));
  m->init_random(seed);
  TrainerOptions o;
  o.optim.lr = 1e-2;
  o.optim.weight_decay = 0.1;
  o.micro_batch_size = 2;
  return std::make_shared<Trainer>(m, nullptr, o);
}

TrainBatch batch() {
  TrainBatch b;
  b.tokens = {{1, 2, 3, 4, 5}, {6, 7, 8, 9, 10}};
  b.response_lengths = {2, 3};
  b.rewards = {1.0, -1.0};
  b.loss_masks = {{1, 1}, {1, 1, 1}};
  return b;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

CATCH_TEST_CASE("base64 round-trips every length and rejects bad text", "[checkpoint]") {
  std::string bytes;
  for (int n = 0; n < 70; ++n) {
    CATCH_REQUIRE(base64_decode(base64_encode(bytes)) == bytes);
    bytes += static_cast<char>((n * 37 + 11) & 255);
  }
  CATCH_CHECK(base64_encode("Man") == "TWFu");
  CATCH_CHECK(base64_encode("Ma") == "TWE=");
  CATCH_CHECK(base64_encode("M") == "TQ==");
  CATCH_CHECK_THROWS(base64_decode("TWF"));
  CATCH_CHECK_THROWS(base64_decode("TW!u"));
  CATCH_CHECK_THROWS(base64_decode("T=Fu"));
}

CATCH_TEST_CASE("generator states restore the same draws", "[checkpoint]") {
  torch::manual_seed(123);
  torch::rand({3});
  const auto saved = rng_state_json();
  const auto first = torch::rand({5});
  torch::manual_seed(999);
  parse_rng_state(saved, "test").apply();
  CATCH_CHECK(torch::equal(torch::rand({5}), first));
  CATCH_CHECK(contains(error_of([] { parse_rng_state(nlohmann::json::object(), "where"); }), "where: rng.cpu missing"));
}

CATCH_TEST_CASE("save then load restores the trainer exactly", "[checkpoint]") {
  TempRoot root;
  auto a = tiny_trainer("qwen2", 1);
  a->train(batch());
  a->train(batch());
  SaveRequest req;
  req.extra = {{"rollout_id", 7}};
  const auto r = save_checkpoint(*a, root.path, req);
  CATCH_CHECK(r.dir == root.path / "iter_0000002");
  CATCH_CHECK(resolve_checkpoint(root.path) == r.dir);

  auto b = tiny_trainer("qwen2", 2);  // other weights, no optimizer state
  const auto st = load_checkpoint(*b, resolve_checkpoint(root.path));
  CATCH_CHECK(st["extra"]["rollout_id"] == 7);
  CATCH_CHECK(b->step() == 2);
  const auto ma = a->train(batch()), mb = b->train(batch());
  CATCH_CHECK(ma.at("train/loss") == mb.at("train/loss"));
  CATCH_CHECK(ma.at("train/grad_norm") == mb.at("train/grad_norm"));
  const auto& pa = a->policy().named_parameters();
  const auto& pb = b->policy().named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) CATCH_CHECK(torch::equal(pa[i].second, pb[i].second));
}

CATCH_TEST_CASE("a checkpoint of another model is refused and nothing changes", "[checkpoint]") {
  TempRoot root;
  auto a = tiny_trainer("qwen3", 1);
  a->train(batch());
  const auto dir = save_checkpoint(*a, root.path, {}).dir;
  auto other = tiny_trainer("llama", 3);
  const auto before = other->policy().named_parameters()[0].second.clone();
  const auto err = error_of([&] { load_checkpoint(*other, dir); });
  CATCH_CHECK(contains(err, "config.json: the checkpoint is for another model: architecture Qwen3ForCausalLM"));
  CATCH_CHECK(other->step() == 0);
  CATCH_CHECK(torch::equal(before, other->policy().named_parameters()[0].second));
  // the optimizer archive alone also names the mismatch
  const auto opt_err =
      error_of([&] { read_optimizer_state(dir / kOptimizerFile, other->policy().named_parameters()); });
  CATCH_CHECK(contains(opt_err, "optimizer.pt: "));
  CATCH_CHECK(contains(opt_err, "hint:"));
}

CATCH_TEST_CASE("leftovers of killed saves are cleaned up; an aside copy comes back", "[checkpoint]") {
  TempRoot root;
  auto a = tiny_trainer("llama", 1);
  const auto dir = save_checkpoint(*a, root.path, {}).dir;  // iter_0000000
  // pid 1 is alive, but not ours to signal: as if another running save owned it
  const int dead = 999999999;  // above pid_max: never a live process
  fs::create_directory(root.path / ("iter_0000005.tmp-" + std::to_string(dead)));
  fs::create_directory(root.path / "iter_0000005.tmp-1");
  fs::rename(dir, root.path / ("iter_0000000.old-" + std::to_string(dead)));
  std::ofstream(root.path / "notes.tmp-5") << "not ours";
  // the pointer names iteration 0: resolve finds the aside copy
  CATCH_CHECK(resolve_checkpoint(root.path) == root.path / ("iter_0000000.old-" + std::to_string(dead)));
  recover_interrupted_saves(root.path);
  CATCH_CHECK(fs::exists(dir / kStateFile));
  CATCH_CHECK(!fs::exists(root.path / ("iter_0000005.tmp-" + std::to_string(dead))));
  CATCH_CHECK(fs::exists(root.path / "iter_0000005.tmp-1"));  // a live process's: left alone
  CATCH_CHECK(fs::exists(root.path / "notes.tmp-5"));         // not a checkpoint name: left alone
  CATCH_CHECK(resolve_checkpoint(root.path) == dir);
}

// While it lives, files this process writes may not grow past `bytes` (the kernel says
// EFBIG; SIGXFSZ, which would kill us, is ignored meanwhile).
struct FileSizeLimit {
  rlimit old{};
  void (*old_handler)(int) = nullptr;
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &old);
    old_handler = signal(SIGXFSZ, SIG_IGN);
    rlimit lim = old;
    lim.rlim_cur = bytes;
    CATCH_REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, old_handler);
  }
};

CATCH_TEST_CASE("a save the kernel refuses part-way throws, and the last good checkpoint stays", "[checkpoint]") {
  TempRoot root;
  auto t = tiny_trainer("llama", 1);
  t->train(batch());
  const auto good = save_checkpoint(*t, root.path, {}).dir;  // iter_0000001
  const auto weights = fs::file_size(good / "model.safetensors");
  const auto optim = fs::file_size(good / kOptimizerFile);
  CATCH_REQUIRE(optim > weights + 4096);  // AdamW keeps two moments per weight
  t->train(batch());
  std::string err;
  {
    FileSizeLimit limit(weights + 2048);  // the weights fit, optimizer.pt does not
    err = error_of([&] { save_checkpoint(*t, root.path, {}); });
  }
  CATCH_CHECK(contains(err, "optimizer.pt: write failed: File too large"));
  // nothing of the failed save is left; the pointer still names the good one, which loads
  CATCH_CHECK(resolve_checkpoint(root.path) == good);
  CATCH_CHECK(!fs::exists(root.path / "iter_0000002"));
  for (const auto& e : fs::directory_iterator(root.path))
    CATCH_CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);
  auto back = tiny_trainer("llama", 2);
  load_checkpoint(*back, good);
  CATCH_CHECK(back->step() == 1);
  // and the next save, with room again, works
  CATCH_CHECK(save_checkpoint(*t, root.path, {}).dir == root.path / "iter_0000002");
}
