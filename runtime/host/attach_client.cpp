#include "host/attach_client.hpp"
#include <cstdio>
namespace rl {
int run_attach(const AttachOptions&) { std::fputs("rlhost attach: TODO\n", stderr); return 2; }
}
