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

// E consecutive elements at p (aligned to their size) as floats, in one load where
// they make 4, 8 or 16 bytes (two for 32).
template <class T, int E>
__device__ __forceinline__ void load_vec(const T* p, float (&out)[E]) {
  constexpr int kBytes = E * static_cast<int>(sizeof(T));
  if constexpr (kBytes == 16 || kBytes == 32) {
#pragma unroll
    for (int h = 0; h < kBytes / 16; ++h) {
      const uint4 v = reinterpret_cast<const uint4*>(p)[h];
      const T* t = reinterpret_cast<const T*>(&v);
#pragma unroll
      for (int e = 0; e < 16 / static_cast<int>(sizeof(T)); ++e) out[h * (16 / sizeof(T)) + e] = to_f(t[e]);
    }
  } else if constexpr (kBytes == 8) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    const T* t = reinterpret_cast<const T*>(&v);
#pragma unroll
    for (int e = 0; e < E; ++e) out[e] = to_f(t[e]);
  } else if constexpr (kBytes == 4) {
    const uint32_t v = *reinterpret_cast<const uint32_t*>(p);
    const T* t = reinterpret_cast<const T*>(&v);
#pragma unroll
    for (int e = 0; e < E; ++e) out[e] = to_f(t[e]);
  } else {
#pragma unroll
    for (int e = 0; e < E; ++e) out[e] = to_f(p[e]);
  }
}

// The inverse: E floats rounded to T into p (aligned to their size).
template <class T, int E>
__device__ __forceinline__ void store_vec(T* p, const float (&in)[E]) {
  constexpr int kBytes = E * static_cast<int>(sizeof(T));
  if constexpr (kBytes % 16 == 0) {
#pragma unroll
    for (int h = 0; h < kBytes / 16; ++h) {
      uint4 v;
      T* t = reinterpret_cast<T*>(&v);
#pragma unroll
      for (int e = 0; e < 16 / static_cast<int>(sizeof(T)); ++e) t[e] = from_f<T>(in[h * (16 / sizeof(T)) + e]);
      reinterpret_cast<uint4*>(p)[h] = v;
    }
  } else if constexpr (kBytes == 8) {
    uint2 v;
    T* t = reinterpret_cast<T*>(&v);
#pragma unroll
    for (int e = 0; e < E; ++e) t[e] = from_f<T>(in[e]);
    *reinterpret_cast<uint2*>(p) = v;
  } else if constexpr (kBytes == 4) {
    uint32_t v;
    T* t = reinterpret_cast<T*>(&v);
#pragma unroll
    for (int e = 0; e < E; ++e) t[e] = from_f<T>(in[e]);
    *reinterpret_cast<uint32_t*>(p) = v;
  } else {
#pragma unroll
    for (int e = 0; e < E; ++e) p[e] = from_f<T>(in[e]);
  }
}

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
