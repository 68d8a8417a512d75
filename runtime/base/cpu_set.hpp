// CPU placement: the CPU lists taskset, cgroups and Slurm write ("0-3,6"), and pinning a
// whole process (every thread it has, and so every thread they start later) to a set.
// rlhost runs its engine processes and its trainer on separate cores with it, so that a
// rollout and a training step overlap for real on a small machine (docs/recipes.md).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace rl {

// The CPUs of a list, ascending and without repeats; throws std::invalid_argument naming
// the item that is not a CPU number or an ascending range.
std::vector<int> parse_cpu_list(std::string_view spec);

// The list form of a set ("0-3,6").
std::string format_cpu_list(const std::vector<int>& cpus);

// The CPUs this process may run on now (sched_getaffinity of the calling thread).
std::vector<int> allowed_cpus();

// Pins every thread of this process to `cpus` (it may widen a set narrowed before);
// threads started later inherit it from their creator. Throws std::runtime_error naming
// the CPUs the machine does not have, a set outside the process's cpuset, or the thread
// that could not be pinned and why.
void pin_process(const std::vector<int>& cpus);

// Pins the calling thread to `cpus`; the threads it starts later (an OpenMP team it leads,
// say) inherit it. Throws as pin_process does.
void pin_thread(const std::vector<int>& cpus);

// Throws std::runtime_error naming the CPUs of `cpus` this machine does not have.
void check_cpus_exist(const std::vector<int>& cpus);

}  // namespace rl
