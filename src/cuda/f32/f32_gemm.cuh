// The f32 kernels' one product: acc[TM][TN] += A^T B over k < K, both operands in shared
// memory, k-major: A as [K][M] (swizzled, f32_tiles.cuh), B as [K][N]. Thread (ty, tx) = (tid /
// 16, tid % 16) of the 16 x 16 grid owns rows ty * TM + i of the M x N product and the columns
// gemm_col<TN>(tx, j): groups of W = min(TN, 4) adjacent columns, the 16 threads of a row side by
// side, so that a warp's B reads are contiguous and its A reads are broadcasts. Every product is
// an f32 FMA, accumulated in k order.
#pragma once

#include "cuda/f32/f32_config.hpp"
#include "cuda/f32/f32_tiles.cuh"

namespace tileattn::cuda::f32 {

template <int TN>
__device__ __forceinline__ int gemm_col(int tx, int j) {
  constexpr int W = TN < 4 ? TN : 4;
  return (j / W) * 16 * W + tx * W + j % W;
}

template <int W>
__device__ __forceinline__ void load_vec(float* dst, const float* src) {
  if constexpr (W == 4) {
    const float4 x = *reinterpret_cast<const float4*>(src);
    dst[0] = x.x, dst[1] = x.y, dst[2] = x.z, dst[3] = x.w;
  } else if constexpr (W == 2) {
    const float2 x = *reinterpret_cast<const float2*>(src);
    dst[0] = x.x, dst[1] = x.y;
  } else {
    dst[0] = *src;
  }
}

template <int W>
__device__ __forceinline__ void store_vec(float* dst, const float* src) {
  if constexpr (W == 4)
    *reinterpret_cast<float4*>(dst) = make_float4(src[0], src[1], src[2], src[3]);
  else if constexpr (W == 2)
    *reinterpret_cast<float2*>(dst) = make_float2(src[0], src[1]);
  else
    *dst = src[0];
}

template <int M, int N, int TM, int TN>
__device__ __forceinline__ void gemm_acc(float (&acc)[TM][TN], const float* a_tile,
                                         const float* b_tile, int k_count, int ty, int tx) {
  static_assert(M == 16 * TM && N == 16 * TN, "a 16 x 16 thread grid");
  static_assert(TM == 1 || TM == 2 || TM == 4, "row vector width");
  constexpr int W = TN < 4 ? TN : 4;
#pragma unroll 4
  for (int k = 0; k < k_count; ++k) {
    float a[TM], b[TN];
    load_vec<TM>(a, a_tile + k * M + ((ty * TM) ^ swizzle<M>(k)));
#pragma unroll
    for (int g = 0; g < TN / W; ++g) load_vec<W>(b + g * W, b_tile + k * N + g * 16 * W + tx * W);
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
  }
}

// acc += A^T B for a gradient that sums over many steps (dK, dV over query blocks, dQ over key
// blocks): the step's product is formed apart and added with Kahan's compensation (comp holds
// the low-order part lost so far). Added one term at a time, a sum over L rows whose first
// terms are large (a causal dV: the early keys' rows) grows a rounding error of about sqrt(L)
// ulps; the step's own sum keeps k_count terms, the running one stays within a few ulps.
template <int M, int N, int TM, int TN>
__device__ __forceinline__ void gemm_acc_compensated(float (&acc)[TM][TN], float (&comp)[TM][TN],
                                                     const float* a_tile, const float* b_tile,
                                                     int k_count, int ty, int tx) {
  float part[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) part[i][j] = 0.0f;
  gemm_acc<M, N>(part, a_tile, b_tile, k_count, ty, tx);
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const float y = part[i][j] - comp[i][j];
      const float t = acc[i][j] + y;
      comp[i][j] = (t - acc[i][j]) - y;
      acc[i][j] = t;
    }
}

// Writes a thread's piece of an M x N result, transposed, as the A operand [N][M] of a later
// product: element (m, n) to dst[n * M + (m ^ swizzle(n))].
template <int M, int N, int TM, int TN>
__device__ __forceinline__ void store_transposed_a(float* dst, const float (&x)[TM][TN], int ty,
                                                   int tx) {
#pragma unroll
  for (int j = 0; j < TN; ++j) {
    const int n = gemm_col<TN>(tx, j);
    float column[TM];
#pragma unroll
    for (int i = 0; i < TM; ++i) column[i] = x[i][j];
    store_vec<TM>(dst + n * M + ((ty * TM) ^ swizzle<M>(n)), column);
  }
}

}  // namespace tileattn::cuda::f32
