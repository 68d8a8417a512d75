// Slurm's srun as a launcher: every task of a job step is one rank. rlhost speaks one
// convention, torchrun's (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT); a task of an srun step that has none of it gets it derived from Slurm's
// once, at startup, so rl.dist, the recipes and LibTorch's c10d see the same thing under
// `srun rlhost ...` as under torchrun (docs/distributed.md).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace rl {

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr;
  int master_port = 0;
};

// The first host of a Slurm hostlist ("gpu[007-010,12],cpu1" -> "gpu007"; zero padding
// kept). Throws rl::Error naming the list when it is malformed.
std::string first_slurm_host(std::string_view nodelist);

// torchrun's values for a task of an srun step, read through `get` (getenv): nullopt
// when WORLD_SIZE is set (a launcher already spoke) or this is no srun task (no
// SLURM_STEP_ID, e.g. the sbatch script itself, which must not wait for peers). The
// master is the step's first node, MASTER_ADDR if set; the port MASTER_PORT if set, else
// 20000 + SLURM_JOB_ID % 20000 (every task derives the same). Throws rl::Error naming a
// variable that is missing or not a number.
std::optional<LaunchEnv> slurm_launch_env(const std::function<const char*(const char*)>& get);

// Under srun: sets the variables slurm_launch_env derives (only those unset) and returns
// the line that says so; "" otherwise. Call while the process has one thread (setenv).
std::string adopt_slurm_env();

}  // namespace rl
