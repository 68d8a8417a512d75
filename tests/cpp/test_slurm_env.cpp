// `srun rlhost ...`: torchrun's variables derived from Slurm's (host/slurm_env), on
// environments written as srun, sbatch and torchrun leave them.
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "host/slurm_env.hpp"

namespace {

std::optional<rl::LaunchEnv> from(const std::map<std::string, std::string>& env) {
  return rl::slurm_launch_env([&](const char* k) -> const char* {
    auto it = env.find(k);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

// What srun gives task 3 of a 4-task step over two nodes, two tasks each.
std::map<std::string, std::string> srun_task() {
  return {{"SLURM_JOB_ID", "123456"},         {"SLURM_STEP_ID", "0"},         {"SLURM_PROCID", "3"},
          {"SLURM_LOCALID", "1"},             {"SLURM_NTASKS", "4"},          {"SLURM_STEP_NUM_TASKS", "4"},
          {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"}, {"SLURM_STEP_NODELIST", "gpu[007-008]"},
          {"SLURM_JOB_NODELIST", "gpu[007-008]"}, {"SLURM_NODEID", "1"}};
}

}  // namespace

TEST_CASE("slurm hostlists: the first host", "[slurm]") {
  CHECK(rl::first_slurm_host("node1") == "node1");
  CHECK(rl::first_slurm_host("node1,node2") == "node1");
  CHECK(rl::first_slurm_host("gpu[007-010,12],cpu1") == "gpu007");
  CHECK(rl::first_slurm_host("gpu[12,7-9]") == "gpu12");
  CHECK(rl::first_slurm_host("rack[3-4]-node") == "rack3-node");
  CHECK(rl::first_slurm_host("a-b.example.org,c") == "a-b.example.org");
  CHECK_THROWS_WITH(rl::first_slurm_host(""), Catch::Contains("empty"));
  CHECK_THROWS_WITH(rl::first_slurm_host("gpu[1-2"), Catch::Contains("'gpu[1-2'") && Catch::Contains("brackets"));
  CHECK_THROWS_WITH(rl::first_slurm_host("gpu[x-2]"), Catch::Contains("number"));
  CHECK_THROWS_WITH(rl::first_slurm_host(",gpu1"), Catch::Contains("empty entry"));
}

TEST_CASE("an srun task gets torchrun's variables; sbatch and torchrun do not", "[slurm]") {
  auto e = from(srun_task());
  REQUIRE(e);
  CHECK(e->rank == 3);
  CHECK(e->world_size == 4);
  CHECK(e->local_rank == 1);
  CHECK(e->local_world_size == 2);
  CHECK(e->master_addr == "gpu007");
  CHECK(e->master_port == 20000 + 123456 % 20000);

  auto env = srun_task();  // MASTER_ADDR and MASTER_PORT given win
  env["MASTER_ADDR"] = "198.18.0.5";
  env["MASTER_PORT"] = "29500";
  e = from(env);
  REQUIRE(e);
  CHECK(e->master_addr == "198.18.0.5");
  CHECK(e->master_port == 29500);

  env = srun_task();  // the job's list and task count when the step's are missing
  env.erase("SLURM_STEP_NODELIST");
  env.erase("SLURM_STEP_NUM_TASKS");
  env["SLURM_JOB_NODELIST"] = "cpu[1-2]";
  e = from(env);
  REQUIRE(e);
  CHECK(e->master_addr == "cpu1");
  CHECK(e->world_size == 4);

  env = srun_task();  // the sbatch script itself: no step, no ranks (it must not wait for peers)
  env.erase("SLURM_STEP_ID");
  CHECK_FALSE(from(env));
  env = srun_task();  // torchrun (or rlhost --nproc) already spoke
  env["WORLD_SIZE"] = "8";
  CHECK_FALSE(from(env));
  CHECK_FALSE(from({}));

  env = srun_task();  // bad values name the variable
  env["SLURM_PROCID"] = "4";
  CHECK_THROWS_WITH(from(env), Catch::Contains("SLURM_PROCID='4'") && Catch::Contains("[0, 3]"));
  env = srun_task();
  env.erase("SLURM_LOCALID");
  CHECK_THROWS_WITH(from(env), Catch::Contains("SLURM_LOCALID is not set"));
  env = srun_task();
  env["MASTER_PORT"] = "http";
  CHECK_THROWS_WITH(from(env), Catch::Contains("MASTER_PORT='http'"));
  env = srun_task();
  env.erase("SLURM_STEP_NODELIST");
  env.erase("SLURM_JOB_NODELIST");
  CHECK_THROWS_WITH(from(env), Catch::Contains("SLURM_JOB_NODELIST") && Catch::Contains("MASTER_ADDR"));
}
