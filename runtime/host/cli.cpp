#include "host/cli.hpp"

#include <cstring>
#include <string_view>

#ifndef RLHOST_VERSION
#define RLHOST_VERSION "0.0.0"
#endif

namespace rl {

std::string version_text() { return std::string("rlhost ") + RLHOST_VERSION + "\n"; }

std::string usage_text() {
  return R"(usage: rlhost [options] [FILE.lua [recipe args...]]
       rlhost attach [PID|PATH|tcp://127.0.0.1:PORT] [--token T] [-e CODE] | attach --list
       rlhost engine|router|tinker [options]   (rlhost engine --help for its options)

Runs a Lua recipe on the rlhost runtime (engines, router, trainer, traces, metrics).

  FILE.lua [args]       run a recipe; args after it are the recipe's own
                        (FILE.lua --help lists the recipe's options)
  -e CODE               run CODE (may repeat; runs before FILE.lua)
  -i                    stay in a REPL after running (spawned tasks keep running)
  (nothing)             open a REPL
  attach [TARGET]       open a REPL inside a live rlhost process (see --list)
  attach --list         list live rlhost processes
  engine --model DIR    serve a model over SGLang's HTTP API (rlhost engine --help)
  router --worker URL   route requests over engines (rlhost router --help)
  tinker --base-model DIR   serve the Tinker API for the tinker SDK (rlhost tinker --help)

options (before FILE.lua):
  --log-level LEVEL     trace|debug|info|warn|error|critical|off (env RLHOST_LOG_LEVEL)
  --control PATH        control socket path (default $XDG_RUNTIME_DIR/rlhost/<pid>.sock)
  --no-control          do not open a control socket
  --control-tcp PORT    also accept attach on 127.0.0.1:PORT (token required;
                        token from RLHOST_CONTROL_TOKEN or printed at start;
                        0: a free port, printed and in the process record)
  --nproc N             run N data-parallel ranks of FILE.lua (RANK, WORLD_SIZE,
                        MASTER_ADDR, MASTER_PORT set; output prefixed [rank R]);
                        ignored when WORLD_SIZE is already set (torchrun)
  --version             print the version
  -h, --help            print this help

exit status: 0 success, 1 Lua error, 2 usage error
)";
}

namespace {

// Built-in commands: each is lua/rl/cmd/<name>.lua, run like a recipe.
constexpr const char* kCommands[] = {"engine", "router", "tinker"};

CliResult usage_error(const std::string& msg) {
  CliResult r;
  r.kind = CliResult::kExit;
  r.exit_code = 2;
  r.message = "rlhost: " + msg + "\nTry 'rlhost --help'.\n";
  return r;
}

bool parse_port(const std::string& s, int& out) {
  if (s.empty() || s.size() > 5) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  out = std::stoi(s);
  return out > 0 && out < 65536;
}

CliResult parse_attach(int argc, char** argv, int i) {
  CliResult r;
  r.kind = CliResult::kAttach;
  for (; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--list") {
      r.attach.list = true;
    } else if (a == "--token" || a == "-e") {
      if (i + 1 >= argc) return usage_error(std::string(a) + " needs a value");
      if (a == "--token")
        r.attach.token = argv[++i];
      else
        r.attach.eval_chunks.emplace_back(argv[++i]);
    } else if (a.rfind("--token=", 0) == 0) {
      r.attach.token = std::string(a.substr(8));
    } else if (a == "-h" || a == "--help") {
      CliResult h;
      h.kind = CliResult::kExit;
      h.message = usage_text();
      return h;
    } else if (!a.empty() && a[0] == '-') {
      return usage_error("attach: unknown option '" + std::string(a) + "'");
    } else if (r.attach.target) {
      return usage_error("attach: more than one target ('" + *r.attach.target + "' and '" + std::string(a) + "')");
    } else {
      r.attach.target = std::string(a);
    }
  }
  return r;
}

}  // namespace

CliResult parse_cli(int argc, char** argv) {
  CliResult r;
  for (int k = 0; k < argc; ++k) r.host.argv0.emplace_back(argv[k]);
  if (argc >= 2 && std::strcmp(argv[1], "attach") == 0) return parse_attach(argc, argv, 2);
  for (const char* cmd : kCommands) {
    if (argc >= 2 && std::strcmp(argv[1], cmd) == 0) {
      r.host.command = cmd;
      for (int i = 2; i < argc; ++i) r.host.script_args.emplace_back(argv[i]);
      return r;
    }
  }

  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](std::string& out) -> bool {
      if (auto eq = a.find('='); eq != std::string::npos && a.rfind("--", 0) == 0) {
        out = a.substr(eq + 1);
        return true;
      }
      if (i + 1 >= argc) return false;
      out = argv[++i];
      return true;
    };
    const std::string name = a.substr(0, a.find('='));
    if (a == "--") {
      ++i;
      break;
    } else if (a == "-h" || a == "--help") {
      r.kind = CliResult::kExit;
      r.message = usage_text();
      return r;
    } else if (a == "--version" || a == "-v") {
      r.kind = CliResult::kExit;
      r.message = version_text();
      return r;
    } else if (a == "-i") {
      r.host.interactive = true;
    } else if (a == "-e") {
      if (i + 1 >= argc) return usage_error("-e needs a chunk of Lua code");
      r.host.eval_chunks.emplace_back(argv[++i]);
    } else if (name == "--log-level") {
      std::string v;
      if (!value(v)) return usage_error("--log-level needs a value (trace|debug|info|warn|error|critical|off)");
      r.host.log_level = v;
    } else if (name == "--control") {
      if (!value(r.host.control_path)) return usage_error("--control needs a socket path");
    } else if (a == "--no-control") {
      r.host.control = false;
    } else if (name == "--control-tcp") {
      std::string v;
      int port = 0;
      if (!value(v) || !(v == "0" || parse_port(v, port)))
        return usage_error("--control-tcp needs a port number 0-65535 (0: a free one), got '" + v + "'");
      r.host.control_tcp_port = port;
    } else if (name == "--nproc") {
      std::string v;
      int n = 0;
      if (!value(v) || v.empty() || v.size() > 4 || v.find_first_not_of("0123456789") != std::string::npos ||
          (n = std::stoi(v)) < 1)
        return usage_error("--nproc needs a number of ranks >= 1, got '" + v + "'");
      r.host.nproc = n;
    } else if (a.size() > 1 && a[0] == '-') {
      return usage_error("unknown option '" + a + "' (host options go before the recipe file)");
    } else {
      break;  // the recipe file
    }
  }
  if (i < argc) {
    r.host.script = argv[i++];
    for (; i < argc; ++i) r.host.script_args.emplace_back(argv[i]);
  }
  if (r.host.nproc && (!r.host.script || r.host.interactive))
    return usage_error("--nproc needs a script to run (rlhost --nproc N FILE.lua [args...]) and no -i");
  if (!r.host.script && r.host.eval_chunks.empty()) r.host.interactive = true;
  return r;
}

}  // namespace rl
