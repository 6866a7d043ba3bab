// Shared-memory tiles of the sm80 kernels: the XOR swizzle of 16-byte chunks and the
// global -> shared tile copy (cp.async, or element-wise with conversion), used by the forward and
// backward kernels.
#pragma once

#include <cstdint>

#include "cuda/common/elements.cuh"
#include "cuda/common/flash_fwd_params.hpp"
#include "cuda/common/ptx.cuh"

namespace tileattn::cuda {

// Shared-memory offset (elements) of 16-byte chunk `chunk` of tile row `row`: the chunk index is
// XOR-ed with row % 8, so the 8 row addresses of one ldmatrix hit 8 different bank groups.
template <int kPitch>
__device__ __forceinline__ int swizzled(int row, int chunk) {
  return row * kPitch + ((chunk ^ (row & 7)) << 3);
}

// Per-lane byte offsets of swizzled 16-byte chunks first + 2k + c (k < kCount) in rows whose
// index is r mod 8: ((first + 2k + c) ^ r) * 16, computed once per lane. With first a multiple
// of 8 the pattern repeats every 4 chunk pairs, so periodic(k) covers any k from four values;
// an ldmatrix address is then a register plus an immediate (ptxas otherwise tends to keep one
// register per unrolled swizzled address).
template <int kCount>
struct SwizzleTable {
  std::uint32_t x[kCount];
  __device__ SwizzleTable(int first, int c, int r) {
#pragma unroll
    for (int k = 0; k < kCount; ++k)
      x[k] = static_cast<std::uint32_t>(((first + 2 * k + c) ^ r) << 4);
  }
  __device__ std::uint32_t periodic(int k) const {
    static_assert(kCount == 4, "periodic offsets need the four-entry table");
    return static_cast<std::uint32_t>((k / 4) * 128) + x[k % 4];
  }
};

// One thread's share of load_tile's 16-byte cp.async copies of a (kRows, kDim) tile, for a kernel
// that copies the same tile shape every step: built once, out of its loop, so a step's copies
// skip the per-copy index arithmetic. The thread copies chunk col0 / 8 of rows row0 + r *
// kRowStep (r < kRounds); round r's global address is the first's plus r kRowStep rows, and,
// when kRowStep is a multiple of 8 (every row of the thread has the same swizzle), so is its
// shared address.
template <typename T, int kRows, int kDim, int kPitch, int kThreads>
struct TileCopyLanes {
  static constexpr int kChunks = kDim / 8;
  static constexpr int kRowStep = kThreads / kChunks;
  static constexpr int kRounds = kRows / kRowStep;
  static_assert(kThreads % kChunks == 0 && kRows % kRowStep == 0,
                "a tile is whole rounds of 16-byte copies, each a fixed set of rows");
  int row0, col0;
  std::uint32_t smem_offset;  // bytes from the tile's start to the thread's first chunk

  // Bytes from the tile's start to the thread's chunk of round r.
  __device__ __forceinline__ std::uint32_t round_offset(int r) const {
    if constexpr (kRowStep % 8 == 0)
      return smem_offset + static_cast<std::uint32_t>(r * kRowStep * kPitch * sizeof(T));
    else
      return static_cast<std::uint32_t>(swizzled<kPitch>(row0 + r * kRowStep, col0 / 8)) *
             sizeof(T);
  }

  // (tid unsigned: its divisions are shifts, without a signed division's rounding fix-up.)
  __device__ explicit TileCopyLanes(unsigned tid)
      : row0(static_cast<int>(tid / kChunks)),
        col0(static_cast<int>(tid % kChunks * 8)),
        smem_offset(static_cast<std::uint32_t>(swizzled<kPitch>(row0, col0 / 8)) * sizeof(T)) {}

  // Copies rows [0, rows_valid) x columns [0, cols_valid) of src (row stride stride_l elements)
  // to the tile at shared address tile, zero-filling the rest; completes with the commit group.
  __device__ __forceinline__ void copy(std::uint32_t tile, const T* src, std::int64_t stride_l,
                                       int rows_valid, int cols_valid) const {
    const bool cols_ok = col0 < cols_valid;
    const T* first = src + row0 * stride_l + col0;
#pragma unroll
    for (int r = 0; r < kRounds; ++r) {
      const bool valid = cols_ok && row0 + r * kRowStep < rows_valid;
      const T* from = valid ? first + r * kRowStep * stride_l : src;
      cp_async_16(tile + round_offset(r), from, valid ? 16 : 0);
    }
  }
};

// The element-wise tile copy (unaligned strides, head dims not a multiple of 8, f32 inputs
// converted to T): stores synchronously, zero-filling rows >= rows_valid and columns >=
// cols_valid.
template <typename T, int kRows, int kDim, int kPitch, int kThreads>
__device__ __forceinline__ void load_tile_elements(T* tile, const char* src, std::int64_t stride_l,
                                                   int rows_valid, int cols_valid, ElemType type) {
  for (int idx = static_cast<int>(threadIdx.x); idx < kRows * kDim; idx += kThreads) {
    const int row = idx / kDim, col = idx % kDim;
    float x = 0.0f;
    if (row < rows_valid && col < cols_valid) x = load_elem(src, row * stride_l + col, type);
    tile[swizzled<kPitch>(row, col >> 3) + (col & 7)] = MmaType<T>::from_float(x);
  }
}

// Copies a (kRows, head_dim) tile from global memory (row stride `stride_l` elements) into shared
// memory, zero-filling rows >= rows_valid and columns >= cols_valid. The 16-byte cp.async path is
// asynchronous (completes with the commit group); the element path stores synchronously.
template <typename T, int kRows, int kDim, int kPitch, int kThreads>
__device__ __forceinline__ void load_tile(T* tile, const char* src, std::int64_t stride_l,
                                          int rows_valid, int cols_valid, bool vector_loads,
                                          ElemType type) {
  const int tid = static_cast<int>(threadIdx.x);
  if (vector_loads) {
    constexpr int kChunks = kDim / 8;
    const T* base = reinterpret_cast<const T*>(src);
    // Each thread's chunk count is a compile-time constant (every tile here is a whole number
    // of rounds of the CTA's threads), so the copies are a straight run without a remainder
    // loop or per-copy index arithmetic.
    static_assert(kRows * kChunks % kThreads == 0, "a tile is whole rounds of 16-byte copies");
#pragma unroll
    for (int round = 0; round < kRows * kChunks / kThreads; ++round) {
      const int idx = tid + round * kThreads;
      const int row = idx / kChunks, chunk = idx % kChunks;
      const bool valid = row < rows_valid && chunk * 8 < cols_valid;
      const T* from = valid ? base + row * stride_l + chunk * 8 : base;
      cp_async_16(smem_address(tile + swizzled<kPitch>(row, chunk)), from, valid ? 16 : 0);
    }
  } else {
    load_tile_elements<T, kRows, kDim, kPitch, kThreads>(tile, src, stride_l, rows_valid,
                                                         cols_valid, type);
  }
}

}  // namespace tileattn::cuda
