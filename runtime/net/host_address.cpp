#include "net/host_address.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "base/errors.hpp"

namespace rl::net {
namespace {

std::string text(const in_addr& a) {
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &a, buf, sizeof buf);
  return buf;
}

std::string interface_address(const std::string& ifname) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) throw_errno("getifaddrs");
  std::string found;
  bool exists = false;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_name || ifname != i->ifa_name) continue;
    exists = true;
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET) {
      found = text(reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr);
      break;
    }
  }
  ::freeifaddrs(list);
  if (found.empty())
    throw Error("interface '" + ifname + "' " + (exists ? "has no IPv4 address" : "does not exist on this host"),
                "GLOO_SOCKET_IFNAME names the interface the job's hosts reach each other on (ip -br addr lists them)");
  return found;
}

}  // namespace

std::string local_address(const std::string& towards, const std::string& ifname) {
  if (!ifname.empty()) return interface_address(ifname);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(towards.c_str(), "9", &hints, &res); rc != 0 || !res)
    throw Error("cannot resolve '" + towards + "': " + ::gai_strerror(rc), "is MASTER_ADDR a name this host resolves?");
  const sockaddr_in to = *reinterpret_cast<const sockaddr_in*>(res->ai_addr);
  ::freeaddrinfo(res);
  if ((ntohl(to.sin_addr.s_addr) >> 24) == 127) return "127.0.0.1";
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw_errno("socket");
  sockaddr_in me{};
  socklen_t len = sizeof me;
  const bool ok = ::connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0;
  const int e = errno;
  ::close(fd);
  if (!ok)
    throw Error("no route from this host to " + towards + " (" + text(to.sin_addr) + "): " + std::strerror(e),
                "set GLOO_SOCKET_IFNAME to the interface the job's hosts share");
  return text(me.sin_addr);
}

}  // namespace rl::net
