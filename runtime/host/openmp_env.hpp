// The OpenMP runtime's waiting policy for this process and its children.
#pragma once

namespace rl {

// Sets GOMP_SPINCOUNT to kOpenMpSpins unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is
// already set. Call while the process has one thread (setenv), before LibTorch's
// libgomp loads (it reads its environment once, when the torch module is loaded).
void default_openmp_spin();

// How long an idle OpenMP thread spins (in pause instructions) before it sleeps.
// libgomp's default, 300,000, is ~16 ms on a Sapphire Rapids core (a pause there
// is ~140 cycles); every kernel of a decode step ends at a barrier, and when the
// process gets less than a core per thread (a shared machine) a thread spinning at
// it burns the time its partner needs: the 42M engine at 64 in flight fell from
// ~1100 tok/s (one thread) to ~130 with two. 3,000 (~0.15 ms there) still covers
// the gaps between one step's kernels: -7 % on an idle machine against the default,
// near one thread's speed on a contended one.
constexpr const char* kOpenMpSpins = "3000";

}  // namespace rl
