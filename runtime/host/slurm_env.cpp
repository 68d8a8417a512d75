#include "host/slurm_env.hpp"

#include <cstdlib>

#include "base/errors.hpp"

namespace rl {
namespace {

int int_var(const std::function<const char*(const char*)>& get, const char* name, int lo, int hi) {
  const char* v = get(name);
  if (!v || !*v)
    throw Error(std::string("srun: ") + name + " is not set", "rlhost reads SLURM_PROCID, SLURM_LOCALID and SLURM_NTASKS "
                "(or SLURM_STEP_NUM_TASKS) under srun; or launch with torchrun's variables");
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end || x < lo || x > hi)
    throw Error(std::string("srun: ") + name + "='" + v + "' is not an integer in [" + std::to_string(lo) + ", " +
                std::to_string(hi) + "]");
  return static_cast<int>(x);
}

// The leading count of a tasks-per-node list ("2(x3),1" -> 2).
int first_count(const char* v) {
  if (!v || !*v) return 0;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return end != v && x > 0 && x < (1 << 20) ? static_cast<int>(x) : 0;
}

}  // namespace

std::string first_slurm_host(std::string_view list) {
  const auto bad = [&](const std::string& why) {
    return Error("srun: the node list '" + std::string(list) + "' " + why, "expected Slurm's form, e.g. node[01-04,07],gpu1");
  };
  if (list.empty()) throw bad("is empty");
  // The first entry: up to the first comma outside brackets.
  size_t end = 0;
  int depth = 0;
  for (; end < list.size(); ++end) {
    if (list[end] == '[') ++depth;
    else if (list[end] == ']') --depth;
    else if (list[end] == ',' && depth == 0) break;
    if (depth < 0 || depth > 1) throw bad("has unbalanced brackets");
  }
  if (depth != 0) throw bad("has unbalanced brackets");
  const std::string_view entry = list.substr(0, end);
  const size_t open = entry.find('[');
  if (open == std::string_view::npos) {
    if (entry.empty()) throw bad("starts with an empty entry");
    return std::string(entry);
  }
  const size_t close = entry.find(']', open);
  const std::string_view prefix = entry.substr(0, open), suffix = entry.substr(close + 1);
  std::string_view first = entry.substr(open + 1, close - open - 1);
  first = first.substr(0, std::min(first.find(','), first.size()));
  first = first.substr(0, std::min(first.find('-'), first.size()));
  if (first.empty() || first.find_first_not_of("0123456789") != std::string_view::npos)
    throw bad("has a range that does not start with a number");
  if (suffix.find('[') != std::string_view::npos) throw bad("has two ranges in one name (not supported)");
  return std::string(prefix) + std::string(first) + std::string(suffix);
}

std::optional<LaunchEnv> slurm_launch_env(const std::function<const char*(const char*)>& get) {
  if (const char* ws = get("WORLD_SIZE"); ws && *ws) return std::nullopt;
  const char* step = get("SLURM_STEP_ID");
  if (!step || !*step || !get("SLURM_PROCID")) return std::nullopt;
  LaunchEnv e;
  const char* n = get("SLURM_STEP_NUM_TASKS");
  e.world_size = int_var(get, n && *n ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS", 1, 1 << 20);
  e.rank = int_var(get, "SLURM_PROCID", 0, e.world_size - 1);
  e.local_rank = int_var(get, "SLURM_LOCALID", 0, 1 << 16);
  const char* per = get("SLURM_STEP_TASKS_PER_NODE");
  e.local_world_size = first_count(per && *per ? per : get("SLURM_TASKS_PER_NODE"));
  if (e.local_world_size == 0) e.local_world_size = 1;
  if (const char* a = get("MASTER_ADDR"); a && *a) {
    e.master_addr = a;
  } else {
    const char* nodes = get("SLURM_STEP_NODELIST");
    if (!nodes || !*nodes) nodes = get("SLURM_JOB_NODELIST");
    if (!nodes || !*nodes)
      throw Error("srun: neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set", "set MASTER_ADDR to rank 0's host");
    e.master_addr = first_slurm_host(nodes);
  }
  if (const char* p = get("MASTER_PORT"); p && *p) {
    e.master_port = int_var(get, "MASTER_PORT", 1, 65535);
  } else {
    const char* job = get("SLURM_JOB_ID");
    if (!job || !*job) throw Error("srun: SLURM_JOB_ID is not set", "set MASTER_PORT");
    e.master_port = 20000 + int_var(get, "SLURM_JOB_ID", 0, 2147483647) % 20000;
  }
  return e;
}

std::string adopt_slurm_env() {
  const auto e = slurm_launch_env([](const char* k) { return std::getenv(k); });
  if (!e) return {};
  const auto set = [](const char* k, const std::string& v) { ::setenv(k, v.c_str(), /*overwrite=*/0); };
  set("RANK", std::to_string(e->rank));
  set("WORLD_SIZE", std::to_string(e->world_size));
  set("LOCAL_RANK", std::to_string(e->local_rank));
  set("LOCAL_WORLD_SIZE", std::to_string(e->local_world_size));
  set("MASTER_ADDR", e->master_addr);
  set("MASTER_PORT", std::to_string(e->master_port));
  return "rlhost: srun task " + std::to_string(e->rank) + " of " + std::to_string(e->world_size) + " (local " +
         std::to_string(e->local_rank) + "): RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=" + e->master_addr +
         " and MASTER_PORT=" + std::to_string(e->master_port) + " from Slurm's variables";
}

}  // namespace rl
