// Process-level LibTorch facts and settings: version, threads, devices, and the
// message of a c10::Error without its C++ backtrace.
#pragma once

#include <exception>
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
void set_num_threads(int n);  // throws c10::Error for n <= 0 (LibTorch's own check)
void manual_seed(uint64_t seed);

// If `e` is a c10::Error, sets `message` to its text without the backtrace.
bool describe_c10_error(std::exception_ptr e, std::string& message);

}  // namespace rl::tensor
