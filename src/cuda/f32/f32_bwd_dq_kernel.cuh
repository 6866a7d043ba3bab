// The f32 backward, dQ: one CTA of 256 threads per (query block, head, batch) walks the key
// blocks its rows see, as the forward does: S = Q K^T and dP = dO V^T (f32 FMA), P = exp(S - lse)
// from the given lse, dS = P o (dP o Z - delta) o softcap', dQ += dS K, and writes
// dq = scale * dQ once (no atomics: bitwise reproducible). A key whose K or V is not finite or a
// score that poisons its row flags the row kRowLate for f32_bwd_poison_kernel; rows flagged by
// the prepare kernel (kRowBad) or with lse = -inf take no part.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/elements.cuh"
#include "cuda/common/tile_coords.cuh"
#include "cuda/f32/f32_config.hpp"
#include "cuda/f32/f32_gemm.cuh"
#include "cuda/f32/f32_params.hpp"
#include "cuda/f32/f32_scores.cuh"
#include "cuda/f32/f32_tiles.cuh"

namespace tileattn::cuda::f32 {

template <int kBucket>
__global__ void __launch_bounds__(kThreads)
    f32_bwd_dq_kernel(const __grid_constant__ F32BwdParams p) {
  constexpr F32Tiles cfg = bwd_dq_tiles(kBucket);
  constexpr int kD = cfg.head_dim, kBM = cfg.block_m, kBN = cfg.block_n;
  constexpr int TM = kBM / 16, TN = kBN / 16, TQ = kD / 16;
  constexpr int W = TN < 4 ? TN : 4;

  extern __shared__ __align__(16) float smem[];
  float* const q_t = smem;                                      // [kD][kBM], A (swizzled)
  float* const do_t = q_t + kD * kBM;                           // [kD][kBM], A (swizzled)
  float* const k_t = do_t + kD * kBM;                           // [kD][kBN], B
  float* const v_t = k_t + kD * kBN;                            // [kD][kBN], B
  float* const k_s = v_t + kD * kBN;                            // [kBN][kD], B
  float* const ds_t = k_s + kBN * kD;                           // [kBN][kBM], A (swizzled)
  int* const k_bad = reinterpret_cast<int*>(ds_t + kBN * kBM);  // [kBN]

  const int tid = static_cast<int>(threadIdx.x), ty = tid / 16, tx = tid % 16;
  const TileCoords tile = tile_coords<kBM>(p);
  if (tile.rows_in_block <= 0) return;  // a varlen sequence shorter than the longest
  const int b = tile.b, h = tile.h, m0 = tile.m0, klen = tile.klen;
  const std::int64_t q_row = tile.q0 + m0, k_row = tile.k0;  // rows in the tensors
  int first_top, last_top, first_bottom, last_bottom;
  tile.visible(m0, first_top, last_top);
  tile.visible(m0 + tile.rows_in_block - 1, first_bottom, last_bottom);
  const int n_block_begin = first_top / kBN;
  const int n_block_end = first_top < last_bottom ? (last_bottom + kBN - 1) / kBN : 0;

  if (tid < kBN) k_bad[tid] = 0;
  const std::int64_t do_esize = p.dout_type == ElemType::f32 ? 4 : 2;
  load_tile_kmajor<kBM, kD, true>(
      q_t,
      TileSource{static_cast<const char*>(p.q) +
                     (b * p.q_stride_b + h * p.q_stride_h + q_row * p.q_stride_l) * 4,
                 p.q_stride_l, tile.rows_in_block, p.dim, ElemType::f32},
      nullptr);
  load_tile_kmajor<kBM, kD, true>(
      do_t,
      TileSource{static_cast<const char*>(p.dout) +
                     (b * p.do_stride_b + h * p.do_stride_h + q_row * p.do_stride_l) * do_esize,
                 p.do_stride_l, tile.rows_in_block, p.dim_v, p.dout_type},
      nullptr);
  const char* k_head = static_cast<const char*>(p.k) +
                       (b * p.k_stride_b + tile.hk * p.k_stride_h + k_row * p.k_stride_l) * 4;
  const char* v_head = static_cast<const char*>(p.v) +
                       (b * p.v_stride_b + tile.hk * p.v_stride_h + k_row * p.v_stride_l) * 4;

  const std::int64_t row0 = (static_cast<std::int64_t>(b) * p.heads_q + h) * p.len_q;
  ScoreRow rows[TM];
  float lse[TM], delta[TM], acc[TM][TQ], comp[TM][TQ];
  bool absent[TM], late[TM];
#pragma unroll
  for (int a = 0; a < TM; ++a) {
    rows[a] = score_row(p, tile, m0 + ty * TM + a);
    const bool in_range = rows[a].i < tile.len_q;
    lse[a] = in_range ? p.lse_rows[row0 + rows[a].i] : -INFINITY;
    delta[a] = in_range ? p.delta_rows[row0 + rows[a].i] : 0.0f;
    absent[a] = !in_range || p.row_flags[row0 + rows[a].i] != 0 || lse[a] == -INFINITY;
    late[a] = false;
#pragma unroll
    for (int o = 0; o < TQ; ++o) acc[a][o] = comp[a][o] = 0.0f;
  }
  const int dim4 = (p.dim + 3) & ~3, dim_v4 = (p.dim_v + 3) & ~3;

  for (int n_block = n_block_begin; n_block < n_block_end; ++n_block) {
    const int n0 = n_block * kBN, keys = min(kBN, klen - n0);
    __syncthreads();  // the previous block's dQ product has read ds_t and k_s; k_bad is zero
    const TileSource k_src{k_head + n0 * p.k_stride_l * 4, p.k_stride_l, keys, p.dim,
                           ElemType::f32};
    load_tile_kmajor<kBN, kD, false>(k_t, k_src, k_bad);
    load_tile_rows<kBN, kD>(k_s, k_src, nullptr);
    load_tile_kmajor<kBN, kD, false>(
        v_t, TileSource{v_head + n0 * p.v_stride_l * 4, p.v_stride_l, keys, p.dim_v, ElemType::f32},
        k_bad);
    __syncthreads();

    float s[TM][TN], dp[TM][TN];
#pragma unroll
    for (int a = 0; a < TM; ++a)
#pragma unroll
      for (int j = 0; j < TN; ++j) s[a][j] = dp[a][j] = 0.0f;
    gemm_acc<kBM, kBN>(s, q_t, k_t, dim4, ty, tx);
    gemm_acc<kBM, kBN>(dp, do_t, v_t, dim_v4, ty, tx);

    bool key_bad[TN];
#pragma unroll
    for (int j = 0; j < TN; ++j) key_bad[j] = k_bad[gemm_col<TN>(tx, j)] != 0;
#pragma unroll
    for (int a = 0; a < TM; ++a) {
      float factor[TN];
#pragma unroll
      for (int g = 0; g < TN / W; ++g)
        dropout_factors<W>(p, b, h, rows[a].i, n0 + gemm_col<TN>(tx, g * W), factor + g * W);
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const int key = n0 + gemm_col<TN>(tx, j);
        float ds = 0.0f;
        if (!absent[a] && key_visible(p, rows[a], key)) {
          bool poison = key_bad[j];
          float dcap = 1.0f;
          const float x = poison ? 0.0f : modified_score(p, rows[a], key, s[a][j], poison, dcap);
          if (poison) {
            late[a] = true;
          } else {
            const float prob = expf(x - lse[a]);
            ds = prob * (dp[a][j] * factor[j] - delta[a]) * dcap;
          }
        }
        s[a][j] = ds;
      }
    }
    store_transposed_a<kBM, kBN>(ds_t, s, ty, tx);
    __syncthreads();
    if (tid < kBN) k_bad[tid] = 0;
    gemm_acc_compensated<kBM, kD>(acc, comp, ds_t, k_s, kBN, ty, tx);
  }

  const std::int64_t dq_esize = p.dq_type == ElemType::f32 ? 4 : 2;
#pragma unroll
  for (int a = 0; a < TM; ++a) {
    const int i = rows[a].i;
    if (i >= tile.len_q) continue;
    if (late[a]) atomicOr(p.row_flags + row0 + i, kRowLate);
    char* const dq_row =
        static_cast<char*>(p.dq) +
        (b * p.dq_stride_b + h * p.dq_stride_h + (tile.q0 + i) * p.dq_stride_l) * dq_esize;
#pragma unroll
    for (int o = 0; o < TQ; ++o) {
      const int col = gemm_col<TQ>(tx, o);
      if (col < p.dim) store_elem(dq_row, col, p.dq_type, acc[a][o] * p.scale);
    }
  }
}

}  // namespace tileattn::cuda::f32
