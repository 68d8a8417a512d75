// The address other hosts of a job reach this one at: where a multi-host job's
// engines bind and what it publishes for them (lua/rl/recipe/hosts.lua).
#pragma once

#include <string>

namespace rl::net {

// IPv4 address of interface `ifname` when given (GLOO_SOCKET_IFNAME's interface: the
// one the job's ranks already talk over); else the source address of the route to
// `towards` (a host name or address: rank 0's, MASTER_ADDR), found by connecting a UDP
// socket, which sends nothing. "127.0.0.1" for a loopback `towards`. Throws rl::Error
// naming the interface or the host.
std::string local_address(const std::string& towards, const std::string& ifname = "");

}  // namespace rl::net
