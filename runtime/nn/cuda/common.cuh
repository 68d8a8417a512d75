// Shared device helpers of the engine's CUDA kernels: dtype conversions that
// round as LibTorch does (to nearest even), warp and block reductions, and the
// dispatch from kernels.hpp's DType to a C++ type.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "nn/cuda/kernels.hpp"

namespace rl::nn::cuda::detail {

template <class T>
__device__ __forceinline__ float to_f(T x);
template <>
__device__ __forceinline__ float to_f<float>(float x) { return x; }
template <>
__device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <>
__device__ __forceinline__ float to_f<__half>(__half x) { return __half2float(x); }

template <class T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }

// x rounded to T and back: what a LibTorch op in dtype T leaves of a float result.
template <class T>
__device__ __forceinline__ float round_to(float x) { return to_f<T>(from_f<T>(x)); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // part[] may still be read by a previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  float s = lane < warps ? part[lane] : 0.0f;
  return warp_sum(s);
}

}  // namespace rl::nn::cuda::detail

// Calls F.template operator()<T>() with the C++ type of a DType.
#define RL_CUDA_DISPATCH(dtype, ...)                                       \
  [&] {                                                                   \
    switch (dtype) {                                                      \
      case ::rl::nn::cuda::DType::kFloat32: {                             \
        using T = float;                                                  \
        return __VA_ARGS__();                                             \
      }                                                                   \
      case ::rl::nn::cuda::DType::kBFloat16: {                            \
        using T = __nv_bfloat16;                                          \
        return __VA_ARGS__();                                             \
      }                                                                   \
      default: {                                                          \
        using T = __half;                                                 \
        return __VA_ARGS__();                                             \
      }                                                                   \
    }                                                                     \
  }()
