// Trainer checkpoints: save and resume a run exactly (docs/trainer.md, "Checkpoints").
//
//   ROOT/latest_checkpointed_iteration.txt      "4" (Megatron's pointer; slime's --save/--load)
//   ROOT/iter_0000004/config.json               the policy as a Hugging Face model directory
//                     model.safetensors         (the model's dtype; sharded past 5 GiB)
//                     tokenizer.json, ...       copied from the model's source directory
//                     optimizer.pt              AdamW state (checkpoint_state.hpp)
//                     trainer_state.json        step, options, RNG, the recipe's extra, file sizes
//
// A save writes ROOT/iter_N.tmp-<pid>, fsyncs every file and the directory, then
// renames it to iter_N (moving an existing iter_N aside to iter_N.old-<pid> first
// and removing it last), and only then rewrites the pointer (temp file, fsync,
// rename). A process killed at any instant leaves a complete checkpoint that
// resolve_checkpoint finds. Knows nothing of Lua.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainer/trainer.hpp"

namespace rl::trainer {

inline constexpr const char* kLatestFile = "latest_checkpointed_iteration.txt";
inline constexpr const char* kStateFile = "trainer_state.json";
inline constexpr const char* kOptimizerFile = "optimizer.pt";

// What the caller adds to trainer_state.json besides the trainer's own state.
struct SaveRequest {
  int64_t iteration = -1;                                 // directory name; < 0: the trainer's step
  nlohmann::json options = nlohmann::json::object();      // the trainer's options, slime's names
  nlohmann::json extra = nlohmann::json::object();        // the recipe's state (data position, ...)
  nlohmann::json sources = nlohmann::json::object();      // where the model / reference came from
  std::string weight_version;                             // empty: the step
  std::filesystem::path tokenizer_dir;                    // tokenizer files copied from here, if any
};

struct SaveResult {
  std::filesystem::path dir;       // ROOT/iter_N
  int64_t iteration = 0;
  std::vector<std::string> files;  // names written into dir
};

// iter_0000042 (Megatron's seven digits).
std::string iteration_dir_name(int64_t iteration);

// Writes a checkpoint of `t` under `root` (created if needed) with the protocol
// above. Throws rl::Error naming the path; on failure the temp directory is removed
// and the previous checkpoint and pointer are untouched. Not safe against another
// process saving into the same root at the same time.
SaveResult save_checkpoint(Trainer& t, const std::filesystem::path& root, const SaveRequest& req);

// The checkpoint directory `path` names: `path` itself when it holds
// trainer_state.json, else the iteration its latest_checkpointed_iteration.txt
// names — or the previous copy (iter_N.old-<pid>) of that iteration when a save
// was killed between its two renames. Throws rl::Error naming what is missing,
// with a hint.
std::filesystem::path resolve_checkpoint(const std::filesystem::path& path);

// trainer_state.json of a checkpoint directory: parsed, format checked, and every
// file it lists present with the size it was written with (a truncated copy fails
// here, naming the file).
nlohmann::json read_trainer_state(const std::filesystem::path& dir);

// Restores `t` from the checkpoint directory: weights (unless !weights, when the
// policy was just loaded from dir), AdamW state, step and generator states. Every
// file is read and checked against the trainer's model first (config, names,
// shapes): on an error nothing has changed. Returns trainer_state.json.
nlohmann::json load_checkpoint(Trainer& t, const std::filesystem::path& dir, bool weights = true);

// What saves killed part-way left in root: temp directories of processes no
// longer running are removed; a previous checkpoint that such a save had moved
// aside is put back under its name (or removed, when the new one made it). Runs
// at the start of each save_checkpoint.
void recover_interrupted_saves(const std::filesystem::path& root);

}  // namespace rl::trainer
