// The parts of a trainer checkpoint that are not the model: AdamW's per-parameter
// state (optimizer.pt, a LibTorch archive keyed by parameter position and checked
// against parameter names and shapes) and the random generators' states (JSON,
// base64). Reading is separate from applying so that a load can check every file
// before it changes anything. Used by trainer/checkpoint.cpp.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "nn/weights.hpp"

namespace rl::trainer {

// One parameter's AdamW state (absent before its first step).
struct AdamWSlot {
  int64_t step = 0;
  torch::Tensor exp_avg, exp_avg_sq, max_exp_avg_sq;  // max_exp_avg_sq only with amsgrad
};

// AdamW state of `params` (the optimizer's parameters, in order, under their
// names) to `file`: names, shapes and per-parameter state. The file is written
// and fsync'd in place (the caller writes into a temporary directory).
void write_optimizer_state(torch::optim::AdamW& optim, const nn::NamedTensors& params,
                           const std::filesystem::path& file);

// Writes a LibTorch archive to `file` through a descriptor, fsync'd; a failed write
// (a full disk) throws rl::Error naming the file, never aborts the process.
void save_archive_synced(torch::serialize::OutputArchive& ar, const std::filesystem::path& file);

// Opens an rlhost archive (`file`) into `ar` and checks its "format" is `format`; returns
// its "names" (the parameter names). Throws rl::Error naming the file and `what` ("optimizer").
std::vector<std::string> open_archive(torch::serialize::InputArchive& ar, const std::filesystem::path& file,
                                      const char* format, const std::string& what);

// Reads `file` and checks it against `params`: same count, names and shapes.
// Throws rl::Error naming the file (truncated or not an archive, another model)
// with a hint. The tensors come back on the parameters' devices.
std::vector<std::optional<AdamWSlot>> read_optimizer_state(const std::filesystem::path& file,
                                                           const nn::NamedTensors& params);

// Replaces the optimizer's state with `slots` (from read_optimizer_state).
void apply_optimizer_state(torch::optim::AdamW& optim, const nn::NamedTensors& params,
                           std::vector<std::optional<AdamWSlot>> slots);

// The default CPU generator's state (and each CUDA device's, when there are any):
// {"cpu": {"seed": n, "state": base64}, "cuda": [{...}, ...]}.
nlohmann::json rng_state_json();

// Checks `j` (as rng_state_json writes it) and returns the restore to run;
// throws rl::Error naming `where` when it is malformed. CUDA states are skipped
// when the device count differs (a resume on other hardware).
struct RngRestore {
  std::string cpu_state;                 // raw bytes
  std::vector<std::string> cuda_states;  // raw bytes per device
  void apply() const;
};
RngRestore parse_rng_state(const nlohmann::json& j, const std::string& where);

std::string base64_encode(const std::string& bytes);
// Throws std::invalid_argument on a character outside the alphabet or a bad length.
std::string base64_decode(const std::string& text);

}  // namespace rl::trainer
