// Global -> shared tile loads of the f32 kernels. Every element is read through f32 (any storage
// type), every tile is filled completely (zeros past the valid rows and columns), and a
// non-finite element is stored as 0 and flags its row (atomicOr into `row_bad`), so that a row a
// CTA must not use can never put NaN into a product (0 x NaN): docs/semantics.md, "Non-finite
// values". The caller decides what a flagged row means.
//
// Two layouts:
//  - k-major ("transposed", the m x k operand stored as [k][m]): an A operand of
//    f32_gemm.cuh (swizzled: element (k, m) at k * M + (m ^ swizzle(k))) or a B operand (plain);
//  - row-major ([m][k], pitch kCols): a B operand whose rows are the product's k dimension.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/common/elements.cuh"
#include "cuda/f32/f32_config.hpp"

namespace tileattn::cuda::f32 {

// The XOR swizzle of an A operand [k][M]: multiples of 4 (so float4 reads stay contiguous) that
// spread the rows written by one warp over all banks. Needs M >= 32.
template <int M>
__device__ __forceinline__ int swizzle(int k) {
  if constexpr (M >= 32)
    return ((k >> 2) & 7) << 2;
  else
    return 0;
}

// One source tile: rows [0, rows) of `base` with `stride` elements between rows, `cols` valid
// columns, elements of type `type`.
struct TileSource {
  const char* base;  // element 0 of row 0 (bytes)
  std::int64_t stride;
  int rows, cols;
  ElemType type;
};

__device__ __forceinline__ float load_sanitized(const TileSource& s, int m, int k, bool& bad) {
  if (m >= s.rows || k >= s.cols) return 0.0f;
  const float x = load_elem(s.base, static_cast<std::int64_t>(m) * s.stride + k, s.type);
  if (!isfinite(x)) {
    bad = true;
    return 0.0f;
  }
  return x;
}

// dst[k][m] (k < kCols, m < M), swizzled when kSwizzled. Lanes run along m, so a warp writes 32
// consecutive m of one k (no bank conflicts).
template <int M, int kCols, bool kSwizzled>
__device__ __forceinline__ void load_tile_kmajor(float* dst, const TileSource& s, int* row_bad) {
  static_assert(kThreads % M == 0, "rows per pass");
  const int tid = static_cast<int>(threadIdx.x);
  const int m = tid % M;
  bool bad = false;
#pragma unroll 4
  for (int k = tid / M; k < kCols; k += kThreads / M) {
    const float x = load_sanitized(s, m, k, bad);
    dst[k * M + (kSwizzled ? (m ^ swizzle<M>(k)) : m)] = x;
  }
  if (bad && row_bad != nullptr) atomicOr(row_bad + m, 1);
}

// dst[m][k] (m < M rows, pitch kCols). Lanes run along k: coalesced reads, contiguous writes.
template <int M, int kCols>
__device__ __forceinline__ void load_tile_rows(float* dst, const TileSource& s, int* row_bad) {
  static_assert(kCols % 32 == 0 && kThreads % kCols == 0, "columns per pass");
  const int tid = static_cast<int>(threadIdx.x);
  const int k = tid % kCols;
#pragma unroll 4
  for (int m = tid / kCols; m < M; m += kThreads / kCols) {
    bool bad = false;
    dst[m * kCols + k] = load_sanitized(s, m, k, bad);
    if (bad && row_bad != nullptr) atomicOr(row_bad + m, 1);
  }
}

}  // namespace tileattn::cuda::f32
