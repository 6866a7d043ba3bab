// The backward kernels' dK / dV epilogue from m16n8 C fragments (the sm80 kernels' mma.sync and
// the sm90 kernel's wgmma accumulators share the layout): element stores with bounds checks, or
// staged through shared memory and stored as whole 16-byte row chunks.
#pragma once

#include <cstdint>

#include "cuda/common/elements.cuh"
#include "cuda/common/flash_bwd_params.hpp"
#include "cuda/common/ptx.cuh"

namespace tileattn::cuda {

// Where a backward CTA's keys lie: batch entry b's rows from k0 in the tensors (a varlen
// sequence's first packed row; 0 for a padded batch, placed by the batch stride), len_k of them.
struct KeyRows {
  int b, k0, len_k;
};

// The backward's epilogue for one thread's two key rows key_row and + 8 (rows at or past
// len_k are skipped): dK = scale * acc_dk and dV = acc_dv, columns col0 + 8 dt + 2t (+1) below
// dim / dim_v, from m16n8 C fragments (elements 0-1: row key_row, 2-3: row + 8).
template <int kTiles>
__device__ void store_dk_dv_rows(const FlashBwdParams& p, const float (&acc_dk)[kTiles][4],
                                 const float (&acc_dv)[kTiles][4], const KeyRows& keys, int hk,
                                 int key_row, int col0, int t) {
  const int b = keys.b;
  const std::int64_t dk_esize = p.dk_type == ElemType::f32 ? 4 : 2;
  const std::int64_t dv_esize = p.dv_type == ElemType::f32 ? 4 : 2;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int j = key_row + 8 * hh;
    if (j >= keys.len_k) continue;
    const std::int64_t row = keys.k0 + j;
    char* dk_row = static_cast<char*>(p.dk) +
                   (b * p.dk_stride_b + hk * p.dk_stride_h + row * p.dk_stride_l) * dk_esize;
    char* dv_row = static_cast<char*>(p.dv) +
                   (b * p.dv_stride_b + hk * p.dv_stride_h + row * p.dv_stride_l) * dv_esize;
#pragma unroll
    for (int dt = 0; dt < kTiles; ++dt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int d = col0 + dt * 8 + 2 * t + e;
        if (d < p.dim) store_elem(dk_row, d, p.dk_type, acc_dk[dt][2 * hh + e] * p.scale);
        if (d < p.dim_v) store_elem(dv_row, d, p.dv_type, acc_dv[dt][2 * hh + e]);
      }
  }
}

// The staged dK / dV epilogue, where dK and dV are 16-bit with rows in 16-byte chunks
// (p.dkv_vector_stores), through shared memory that the CTA no longer reads: `stage` holds
// kPitchBytes per key row, dV kDvOffset bytes after dK, and row r's 16-byte chunk c lies at
// c ^ (r % 8), so that neither the fragment-order writes nor the row-order reads conflict.
// stage_dk_dv writes a lane's fragments (rows key_row0 + 16 mt + 8 hh, stage chunks chunk0 + nt,
// column 2t of each) as 16-bit pairs, dK times scale; after a barrier over the writers,
// store_staged_dk_dv_rows stores kRows whole rows from row first_row of the stage (kCols columns
// from global column col0) as 16-byte chunks, spread over kThreads threads. Whole 16-byte row
// chunks replace store_dk_dv_rows's bounds-checked element stores, which cost the most where a
// CTA runs few steps (short sequences); 4-byte pair stores straight from the fragments gain less
// and make ptxas spill in the 2-D kernel's step loop at D 128. The sm80 kernels' row loop is not
// unrolled (kUnrollRows): unrolled, ptxas spills in the 2-D kernel's D 64 loop.
template <std::uint32_t kPitchBytes, std::uint32_t kDvOffset, int kMTiles, int kTiles>
__device__ __forceinline__ void stage_dk_dv(const FlashBwdParams& p,
                                            const float (&acc_dk)[kMTiles][kTiles][4],
                                            const float (&acc_dv)[kMTiles][kTiles][4],
                                            std::uint32_t stage, int key_row0, int chunk0, int t) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = key_row0 + 16 * mt + 8 * hh;
#pragma unroll
      for (int nt = 0; nt < kTiles; ++nt) {
        const std::uint32_t at = stage + r * kPitchBytes + (((chunk0 + nt) ^ (r % 8)) * 16) + t * 4;
        store_shared_u32(at, pack_pair16(p.dk_type, acc_dk[mt][nt][2 * hh] * p.scale,
                                         acc_dk[mt][nt][2 * hh + 1] * p.scale));
        store_shared_u32(at + kDvOffset, pack_pair16(p.dv_type, acc_dv[mt][nt][2 * hh],
                                                     acc_dv[mt][nt][2 * hh + 1]));
      }
    }
}

template <int kCols, int kRows, int kThreads, std::uint32_t kPitchBytes, std::uint32_t kDvOffset,
          bool kUnrollRows>
__device__ __forceinline__ void store_staged_dk_dv_rows(const FlashBwdParams& p,
                                                        std::uint32_t stage, const KeyRows& keys,
                                                        int hk, int n0, int col0, int first_row,
                                                        int thread) {
  constexpr int kChunks = kCols / 8;  // 16-byte chunks per staged row
  static_assert(kChunks >= 8 && kChunks % 8 == 0, "c ^ (r % 8) stays inside the row");
  const int dk_chunks = (p.dim - col0) / 8, dv_chunks = (p.dim_v - col0) / 8;  // may be <= 0
  const int b = keys.b;
  const std::int64_t k0 = keys.k0;
  char* const dk_base = static_cast<char*>(p.dk) +
                        (b * p.dk_stride_b + hk * p.dk_stride_h + k0 * p.dk_stride_l + col0) * 2;
  char* const dv_base = static_cast<char*>(p.dv) +
                        (b * p.dv_stride_b + hk * p.dv_stride_h + k0 * p.dv_stride_l + col0) * 2;
  const auto store_chunk = [&](int w) {
    const int r = first_row + w / kChunks, c = w % kChunks;
    const std::int64_t j = n0 + r;  // the key row within the entry
    if (j >= keys.len_k) return;
    const std::uint32_t at = stage + r * kPitchBytes + ((c ^ (r % 8)) * 16);
    if (c < dk_chunks)
      *reinterpret_cast<uint4*>(dk_base + (j * p.dk_stride_l + 8 * c) * 2) = load_shared_v4u(at);
    if (c < dv_chunks)
      *reinterpret_cast<uint4*>(dv_base + (j * p.dv_stride_l + 8 * c) * 2) =
          load_shared_v4u(at + kDvOffset);
  };
  if constexpr (kUnrollRows) {
#pragma unroll
    for (int w = thread; w < kRows * kChunks; w += kThreads) store_chunk(w);
  } else {
#pragma unroll 1
    for (int w = thread; w < kRows * kChunks; w += kThreads) store_chunk(w);
  }
}

// Both steps for a whole CTA (the sm80 kernels): the caller has synchronised the CTA after its
// last read of the stage.
template <int kCols, int kRows, int kThreads, std::uint32_t kPitchBytes, std::uint32_t kDvOffset,
          int kMTiles, int kTiles>
__device__ __forceinline__ void stage_and_store_dk_dv(const FlashBwdParams& p,
                                                      const float (&acc_dk)[kMTiles][kTiles][4],
                                                      const float (&acc_dv)[kMTiles][kTiles][4],
                                                      std::uint32_t stage, const KeyRows& keys,
                                                      int hk, int n0, int col0, int key_row0,
                                                      int chunk0, int t) {
  stage_dk_dv<kPitchBytes, kDvOffset>(p, acc_dk, acc_dv, stage, key_row0, chunk0, t);
  __syncthreads();
  store_staged_dk_dv_rows<kCols, kRows, kThreads, kPitchBytes, kDvOffset, false>(
      p, stage, keys, hk, n0, col0, 0, static_cast<int>(threadIdx.x));
}

}  // namespace tileattn::cuda
