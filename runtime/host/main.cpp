// rlhost: one native binary that runs Lua recipes on the rlhost runtime.
#include <cstdio>

#include "bindings/host.hpp"
#include "host/attach_client.hpp"
#include "host/cli.hpp"

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
  return rl::lua::run_host(cli.host);
}
