// `rlhost attach`: a REPL whose chunks run inside a live rlhost process, over
// its control socket (see control_server.hpp for the protocol).
#pragma once

#include "host/cli.hpp"

namespace rl {

// Returns the exit status: 0, 1 when a -e chunk failed, 2 on usage/connect errors.
int run_attach(const AttachOptions& opts);

}  // namespace rl
