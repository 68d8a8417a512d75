// `rlhost --nproc N script.lua args...`: a local data-parallel launch. Runs N
// copies of this binary (without --nproc) with torchrun's environment (RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT=a
// free port), prefixes each line they print with "[rank R] ", forwards SIGINT and
// SIGTERM to them, and when one fails stops the others (SIGTERM, then SIGKILL
// after a grace period). Exit status: 0 when all succeed, else the first failing
// rank's status (128 + signal for a signal).
#pragma once

#include <string>
#include <vector>

namespace rl {

// argv: the full command line of this process; the --nproc option is removed for
// the children.
int run_nproc(int nproc, const std::vector<std::string>& argv);

}  // namespace rl
