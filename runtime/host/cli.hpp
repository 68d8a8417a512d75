// Command line of the rlhost binary (host options come before the recipe;
// everything after the recipe file belongs to the recipe).
//
//   rlhost [options] FILE.lua [recipe args...]   run a recipe
//   rlhost [options] -e CODE [-e CODE...]        run code
//   rlhost [options] -i [FILE.lua [args...]]     run, then a REPL
//   rlhost [options]                             a REPL
//   rlhost attach [PID|PATH] [--token T] [-e CODE]   REPL into a live process
//   rlhost attach --list                         list live processes
//   rlhost engine|router [args...]               a built-in command (a Lua script
//                                                in lua/rl/cmd/, args are its own)
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace rl {

struct HostOptions {
  std::optional<std::string> script;      // recipe file
  std::optional<std::string> command;     // `rlhost engine ...`: runs lua/rl/cmd/<command>.lua
  std::vector<std::string> script_args;   // what follows it
  std::vector<std::string> eval_chunks;   // -e CODE, in order
  bool interactive = false;               // -i, or nothing to run
  std::optional<std::string> log_level;   // --log-level
  std::string control_path;               // --control PATH ("" = default location)
  bool control = true;                    // --no-control disables the socket
  std::optional<int> control_tcp_port;    // --control-tcp PORT (127.0.0.1, token required)
  std::optional<int> nproc;               // --nproc N: N data-parallel ranks (host/launcher.hpp)
  std::vector<std::string> argv0;         // the full command line, for `attach --list`
};

struct AttachOptions {
  std::optional<std::string> target;      // PID, socket path, or tcp://127.0.0.1:PORT
  std::optional<std::string> token;       // for TCP
  std::vector<std::string> eval_chunks;   // -e CODE: run, print, exit
  bool list = false;
};

struct CliResult {
  enum Kind { kRun, kAttach, kExit } kind = kRun;
  HostOptions host;
  AttachOptions attach;
  int exit_code = 0;        // for kExit
  std::string message;      // printed for kExit (stdout when code 0, else stderr)
};

CliResult parse_cli(int argc, char** argv);
std::string usage_text();
std::string version_text();

}  // namespace rl
