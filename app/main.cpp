// rlhost: one native binary that runs Lua recipes on the rlhost runtime.
#include <cstdio>
#include <cstdlib>

#include "base/admin_token.hpp"
#include "bindings/host.hpp"
#include "host/attach_client.hpp"
#include "host/cli.hpp"
#include "host/launcher.hpp"
#include "host/openmp_env.hpp"
#include "host/slurm_env.hpp"

int main(int argc, char** argv) {
  rl::CliResult cli = rl::parse_cli(argc, argv);
  switch (cli.kind) {
    case rl::CliResult::kExit:
      std::fputs(cli.message.c_str(), cli.exit_code == 0 ? stdout : stderr);
      return cli.exit_code;
    case rl::CliResult::kAttach:
      return rl::run_attach(cli.attach);
    case rl::CliResult::kRun:
      break;
  }
  // While this is the only thread: children (engines, routers, ranks) inherit
  // the run's admin token through the environment, never through argv.
  rl::export_admin_token();
  rl::default_openmp_spin();
  // `srun rlhost ...`: torchrun's variables from Slurm's, so everything below sees one
  // convention. A bad Slurm variable is an error naming it.
  try {
    if (const std::string said = rl::adopt_slurm_env(); !said.empty()) std::fprintf(stderr, "%s\n", said.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rlhost: %s\n", e.what());
    return 2;
  }
  if (cli.host.nproc) {
    const char* ws = std::getenv("WORLD_SIZE");
    if (!ws || !*ws) return rl::run_nproc(*cli.host.nproc, cli.host.argv0);
    std::fprintf(stderr, "rlhost: WORLD_SIZE=%s is set (torchrun-style launch): --nproc is ignored\n", ws);
  }
  // A data-parallel rank's output usually goes through a pipe (the launcher's line
  // prefixer, a cluster log): line-buffer it so ranks' lines appear as they happen.
  if (const char* ws = std::getenv("WORLD_SIZE"); ws && *ws) std::setvbuf(stdout, nullptr, _IOLBF, 0);
  return rl::lua::run_host(cli.host);
}
