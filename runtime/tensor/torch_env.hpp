// Process-level LibTorch facts and settings: version, threads, devices, and the
// message of a c10::Error without its C++ backtrace.
#pragma once

#include <exception>
#include <functional>
#include <string>

namespace rl::tensor {

struct TorchInfo {
  std::string version;     // e.g. "2.15.0"
  bool cuda_built = false;     // this build has the CUDA paths compiled in
  bool cuda_available = false; // a CUDA device is usable now
  int cuda_devices = 0;
  int cuda_runtime_version = 0;  // cudaRuntimeGetVersion(), e.g. 13000 (CUDA builds only)
  int nccl_version = 0;          // ncclGetVersion(), e.g. 22807 (CUDA builds only)
  int num_threads = 0;         // intra-op threads
  int num_interop_threads = 0;
  // Threads an at::parallel_for in our own code runs on: num_threads when the
  // runtime was built with the parallel backend's flags (cmake/Torch.cmake), else 1.
  int kernel_threads = 0;
};

TorchInfo torch_info();

// Runs fn on a new thread with `threads` intra-op threads (0: LibTorch's setting) and
// waits for it; fn's exception is rethrown here. For parallel work on a thread that
// lives on: libgomp keeps a worker pool per thread that ever started a parallel
// region, and with more pool threads than CPUs it barely spins at its barriers, so
// the threads that do compute (the engine's scheduler) sleep and are woken at every
// kernel (~180 times per decode step at 2 threads on 2 cores). A thread that ends
// takes its pool with it.
void run_on_passing_thread(int threads, const std::function<void()>& fn);
void set_num_threads(int n);  // throws c10::Error for n <= 0 (LibTorch's own check)
void manual_seed(uint64_t seed);

// If `e` is a c10::Error, sets `message` to its text without the backtrace.
bool describe_c10_error(std::exception_ptr e, std::string& message);

}  // namespace rl::tensor
