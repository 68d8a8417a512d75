#include "base/cpu_set.hpp"

#include <dirent.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace rl {
namespace {

int parse_cpu(std::string_view s, std::string_view item) {
  int v = -1;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < 0 || v >= CPU_SETSIZE)
    throw std::invalid_argument("CPU list: '" + std::string(item) + "' is not a CPU number or a range a-b (e.g. 0-3,6)");
  return v;
}

}  // namespace

std::vector<int> parse_cpu_list(std::string_view spec) {
  std::vector<int> out;
  size_t at = 0;
  if (spec.empty()) throw std::invalid_argument("CPU list: empty (e.g. 0-3,6)");
  while (at <= spec.size()) {
    const size_t end = std::min(spec.find(',', at), spec.size());
    const std::string_view item = spec.substr(at, end - at);
    const size_t dash = item.find('-');
    if (dash == std::string_view::npos) {
      out.push_back(parse_cpu(item, item));
    } else {
      const int a = parse_cpu(item.substr(0, dash), item), b = parse_cpu(item.substr(dash + 1), item);
      if (b < a) throw std::invalid_argument("CPU list: '" + std::string(item) + "' is a descending range");
      for (int c = a; c <= b; ++c) out.push_back(c);
    }
    at = end + 1;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) throw std::runtime_error(std::string("sched_getaffinity: ") + std::strerror(errno));
  std::vector<int> out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

void check_cpus_exist(const std::vector<int>& cpus) {
  // The machine's CPUs (a set may also widen a mask narrowed before: the kernel checks it
  // against the cpuset when it is applied).
  const long ncpu = sysconf(_SC_NPROCESSORS_CONF);
  std::vector<int> missing;
  for (int c : cpus)
    if (ncpu > 0 && c >= ncpu) missing.push_back(c);
  if (!missing.empty())
    throw std::runtime_error("CPU " + format_cpu_list(missing) + " does not exist (this machine has CPUs 0-" +
                             std::to_string(ncpu - 1) + ")");
}

namespace {

cpu_set_t to_set(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  return set;
}

std::string set_error(const std::vector<int>& cpus, const std::string& who) {
  return "sched_setaffinity: " + (errno == EINVAL ? "none of CPUs " + format_cpu_list(cpus) + " is in this process's cpuset"
                                                  : who + ": " + std::strerror(errno));
}

}  // namespace

void pin_thread(const std::vector<int>& cpus) {
  if (cpus.empty()) throw std::invalid_argument("pin_thread: no CPU given");
  check_cpus_exist(cpus);
  const cpu_set_t set = to_set(cpus);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) throw std::runtime_error(set_error(cpus, "this thread"));
}

void pin_process(const std::vector<int>& cpus) {
  if (cpus.empty()) throw std::invalid_argument("pin_process: no CPU given");
  check_cpus_exist(cpus);
  const cpu_set_t set = to_set(cpus);
  // Every thread of the process: /proc/self/task lists them. A thread that ends between
  // the listing and the call (ESRCH) needs no pinning.
  DIR* d = opendir("/proc/self/task");
  if (!d) throw std::runtime_error(std::string("/proc/self/task: ") + std::strerror(errno));
  std::string failed;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const pid_t tid = static_cast<pid_t>(std::atol(e->d_name));
    if (sched_setaffinity(tid, sizeof(set), &set) != 0 && errno != ESRCH && failed.empty())
      failed = set_error(cpus, "thread " + std::to_string(tid));
  }
  closedir(d);
  if (!failed.empty()) throw std::runtime_error(failed);
}

}  // namespace rl
