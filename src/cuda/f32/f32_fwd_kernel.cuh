// The f32 forward: FlashAttention-2's loop with every product an f32 FMA (no tensor cores), for
// f32 storage at f32 accuracy. One CTA of 256 threads per (query block, head, batch): Q^T stays
// in shared memory, each visible key block brings K^T and V, S = Q K^T, the online softmax in
// natural units with an accurate expf, P^T to shared memory, O += P V. A thread owns block_m / 16
// rows of S and O (the 16 threads of a row reduce its max with shuffles).
//
// Non-finite values (docs/semantics.md): the tile loads store non-finite elements as 0 and flag
// their query row or key; a key the row does not see weighs exactly 0 (its K and V, zeroed if
// they were not finite, cannot make NaN); a row that sees a flagged key or a poisoning score, or
// whose query is flagged and that sees any key, writes NaN to out and lse.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/elements.cuh"
#include "cuda/common/flash_fwd_params.hpp"
#include "cuda/common/tile_coords.cuh"
#include "cuda/f32/f32_config.hpp"
#include "cuda/f32/f32_gemm.cuh"
#include "cuda/f32/f32_scores.cuh"
#include "cuda/f32/f32_tiles.cuh"

namespace tileattn::cuda::f32 {

// Max (kSum false) or sum over the 16 threads that share a row (lanes of one half-warp).
template <bool kSum>
__device__ __forceinline__ float row_reduce(float x) {
#pragma unroll
  for (int offset = 1; offset < 16; offset *= 2) {
    const float y = __shfl_xor_sync(0xffffffffu, x, offset);
    x = kSum ? x + y : fmaxf(x, y);
  }
  return x;
}

__device__ __forceinline__ int row_or(int x) {
#pragma unroll
  for (int offset = 1; offset < 16; offset *= 2) x |= __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

template <int kBucket>
__global__ void __launch_bounds__(kThreads)
    f32_fwd_kernel(const __grid_constant__ FlashFwdParams p) {
  constexpr F32Tiles cfg = fwd_tiles(kBucket);
  constexpr int kD = cfg.head_dim, kBM = cfg.block_m, kBN = cfg.block_n;
  constexpr int TM = kBM / 16, TN = kBN / 16, TO = kD / 16;
  constexpr int W = TN < 4 ? TN : 4;

  extern __shared__ __align__(16) float smem[];
  float* const q_t = smem;                                     // [kD][kBM], A operand (swizzled)
  float* const k_t = q_t + kD * kBM;                           // [kD][kBN], B operand
  float* const v_s = k_t + kD * kBN;                           // [kBN][kD], B operand
  float* const p_t = v_s + kBN * kD;                           // [kBN][kBM], A operand (swizzled)
  int* const q_bad = reinterpret_cast<int*>(p_t + kBN * kBM);  // [kBM]
  int* const k_bad = q_bad + kBM;                              // [kBN]

  const int tid = static_cast<int>(threadIdx.x), ty = tid / 16, tx = tid % 16;
  const TileCoords tile = tile_coords<kBM>(p);
  if (tile.rows_in_block <= 0) return;  // a varlen sequence shorter than the longest
  const int b = tile.b, h = tile.h, m0 = tile.m0, klen = tile.klen;
  int first_top, last_top, first_bottom, last_bottom;
  tile.visible(m0, first_top, last_top);
  tile.visible(m0 + tile.rows_in_block - 1, first_bottom, last_bottom);
  const int n_block_begin = first_top / kBN;
  const int n_block_end = first_top < last_bottom ? (last_bottom + kBN - 1) / kBN : 0;

  if (tid < kBM) q_bad[tid] = 0;
  if (tid < kBN) k_bad[tid] = 0;
  __syncthreads();
  const auto* q = static_cast<const char*>(p.q);
  const auto* k = static_cast<const char*>(p.k);
  const auto* v = static_cast<const char*>(p.v);
  load_tile_kmajor<kBM, kD, true>(
      q_t,
      TileSource{q + (b * p.q_stride_b + h * p.q_stride_h +
                      static_cast<std::int64_t>(tile.q0 + m0) * p.q_stride_l) *
                         4,
                 p.q_stride_l, tile.rows_in_block, p.dim, ElemType::f32},
      q_bad);
  const std::int64_t k_row0 = tile.k0;
  const char* k_head = k + (b * p.k_stride_b + tile.hk * p.k_stride_h + k_row0 * p.k_stride_l) * 4;
  const char* v_head = v + (b * p.v_stride_b + tile.hk * p.v_stride_h + k_row0 * p.v_stride_l) * 4;

  ScoreRow rows[TM];
  float row_max[TM], row_sum[TM], acc[TM][TO];
  bool poison[TM], seen[TM];
#pragma unroll
  for (int a = 0; a < TM; ++a) {
    rows[a] = score_row(p, tile, m0 + ty * TM + a);
    row_max[a] = -INFINITY;
    row_sum[a] = 0.0f;
    poison[a] = seen[a] = false;
#pragma unroll
    for (int o = 0; o < TO; ++o) acc[a][o] = 0.0f;
  }
  const int dim4 = (p.dim + 3) & ~3;

  for (int n_block = n_block_begin; n_block < n_block_end; ++n_block) {
    const int n0 = n_block * kBN, keys = min(kBN, klen - n0);
    __syncthreads();  // the previous block's P V has read p_t and v_s; k_bad is zero
    load_tile_kmajor<kBN, kD, false>(
        k_t, TileSource{k_head + n0 * p.k_stride_l * 4, p.k_stride_l, keys, p.dim, ElemType::f32},
        k_bad);
    load_tile_rows<kBN, kD>(
        v_s, TileSource{v_head + n0 * p.v_stride_l * 4, p.v_stride_l, keys, p.dim_v, ElemType::f32},
        k_bad);
    __syncthreads();

    float s[TM][TN];
#pragma unroll
    for (int a = 0; a < TM; ++a)
#pragma unroll
      for (int j = 0; j < TN; ++j) s[a][j] = 0.0f;
    gemm_acc<kBM, kBN>(s, q_t, k_t, dim4, ty, tx);

    bool key_bad[TN];
#pragma unroll
    for (int j = 0; j < TN; ++j) key_bad[j] = k_bad[gemm_col<TN>(tx, j)] != 0;
#pragma unroll
    for (int a = 0; a < TM; ++a) {
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const int key = n0 + gemm_col<TN>(tx, j);
        float x = -INFINITY;
        if (key_visible(p, rows[a], key)) {
          seen[a] = true;
          if (key_bad[j]) {
            poison[a] = true;
          } else {
            float dcap;
            x = modified_score(p, rows[a], key, s[a][j], poison[a], dcap);
          }
        }
        s[a][j] = x;
      }
      // Online softmax: the row's new maximum, rescale of the running sum and O.
      float block_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < TN; ++j) block_max = fmaxf(block_max, s[a][j]);
      const float new_max = fmaxf(row_max[a], row_reduce<false>(block_max));
      const float base = new_max == -INFINITY ? 0.0f : new_max;
      const float rescale = expf(row_max[a] - base);
      row_max[a] = new_max;
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        s[a][j] = expf(s[a][j] - base);
        sum += s[a][j];
      }
      row_sum[a] = row_sum[a] * rescale + sum;
#pragma unroll
      for (int o = 0; o < TO; ++o) acc[a][o] *= rescale;
      if (p.dropout_threshold != 0) {  // after the sum: lse is the softmax's, before dropout
#pragma unroll
        for (int g = 0; g < TN / W; ++g) {
          float factor[W];
          dropout_factors<W>(p, b, h, rows[a].i, n0 + gemm_col<TN>(tx, g * W), factor);
#pragma unroll
          for (int e = 0; e < W; ++e) s[a][g * W + e] *= factor[e];
        }
      }
    }
    store_transposed_a<kBM, kBN>(p_t, s, ty, tx);
    __syncthreads();
    if (tid < kBN) k_bad[tid] = 0;  // read above only; the next loads follow a barrier
    gemm_acc<kBM, kD>(acc, p_t, v_s, kBN, ty, tx);
  }

  __syncthreads();  // q_bad is complete even when no key block ran

  // Epilogue: O / l, lse = max + log l; NaN for a poisoned row, 0 and -inf for a row whose
  // keys all weigh 0 (none visible, or every score below f32's range).
  char* const out = static_cast<char*>(p.out);
  const std::int64_t out_esize = p.out_type == ElemType::f32 ? 4 : 2;
#pragma unroll
  for (int a = 0; a < TM; ++a) {
    const float l = row_reduce<true>(row_sum[a]);
    const int flags = row_or((poison[a] ? 1 : 0) | (seen[a] ? 2 : 0));
    const int i = rows[a].i;
    if (i >= tile.len_q) continue;
    const std::int64_t row = tile.q0 + i;  // in the tensors (varlen: packed rows)
    const bool poisoned = (flags & 1) != 0 || ((flags & 2) != 0 && q_bad[ty * TM + a] != 0);
    char* const out_row =
        out + (b * p.o_stride_b + h * p.o_stride_h + row * p.o_stride_l) * out_esize;
#pragma unroll
    for (int o = 0; o < TO; ++o) {
      const int col = gemm_col<TO>(tx, o);
      if (col < p.dim_v)
        store_elem(out_row, col, p.out_type, poisoned ? NAN : (l > 0.0f ? acc[a][o] / l : 0.0f));
    }
    if (p.lse != nullptr && tx == 0)
      p.lse[b * p.lse_stride_b + h * p.lse_stride_h + row * p.lse_stride_l] =
          poisoned ? NAN : (l > 0.0f ? row_max[a] + logf(l) : -INFINITY);
  }
}

}  // namespace tileattn::cuda::f32
