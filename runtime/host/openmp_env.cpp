#include "host/openmp_env.hpp"

#include <cstdlib>

namespace rl {

void default_openmp_spin() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spins = std::getenv("GOMP_SPINCOUNT");
  if ((policy && *policy) || (spins && *spins)) return;  // the user's choice
  ::setenv("GOMP_SPINCOUNT", kOpenMpSpins, 0);
}

}  // namespace rl
