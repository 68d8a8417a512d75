#include "tensor/torch_env.hpp"

#include <ATen/Parallel.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <atomic>
#include <exception>
#include <thread>

#ifdef RLHOST_WITH_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

namespace rl::tensor {

TorchInfo torch_info() {
  TorchInfo info;
  info.version = TORCH_VERSION;
#ifdef RLHOST_WITH_CUDA
  info.cuda_built = true;
  // Versions of the libraries we linked (answer without a GPU present).
  if (cudaRuntimeGetVersion(&info.cuda_runtime_version) != cudaSuccess) info.cuda_runtime_version = 0;
  if (ncclGetVersion(&info.nccl_version) != ncclSuccess) info.nccl_version = 0;
#endif
  info.cuda_available = torch::cuda::is_available();
  info.cuda_devices = info.cuda_available ? static_cast<int>(torch::cuda::device_count()) : 0;
  info.num_threads = at::get_num_threads();
  info.num_interop_threads = at::get_num_interop_threads();
  // One task per thread; the highest thread id that ran one is how wide our kernels
  // go. On a passing thread, so asking leaves no OpenMP pool with the caller.
  std::atomic<int> widest{0};
  run_on_passing_thread(info.num_threads, [&] {
    at::parallel_for(0, info.num_threads, 1, [&](int64_t, int64_t) {
      const int id = at::get_thread_num() + 1;
      for (int w = widest.load(); w < id && !widest.compare_exchange_weak(w, id);) {
      }
    });
  });
  info.kernel_threads = widest.load();
  return info;
}

void run_on_passing_thread(int threads, const std::function<void()>& fn) {
  std::exception_ptr error;
  std::thread([&] {
    try {
      if (threads > 0) at::set_num_threads(threads);
      fn();
    } catch (...) {
      error = std::current_exception();
    }
  }).join();
  if (error) std::rethrow_exception(error);
}

void set_num_threads(int n) { at::set_num_threads(n); }

void manual_seed(uint64_t seed) { torch::manual_seed(seed); }

bool describe_c10_error(std::exception_ptr e, std::string& message) {
  try {
    std::rethrow_exception(e);
  } catch (const c10::Error& err) {
    message = err.what_without_backtrace();
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace rl::tensor
