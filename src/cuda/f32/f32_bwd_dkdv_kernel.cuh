// The f32 backward, dK and dV: one CTA of 256 threads per (key block, kv head, batch) keeps K^T
// and V^T in shared memory and walks, for every query head of its kv head (GQA sums in
// registers), the query blocks that can see its keys: S^T = K Q^T and dP^T = V dO^T (f32 FMA),
// P^T = exp(S^T - lse), dV += (P o Z)^T dO, dS^T = P^T o (dP^T o Z - delta) o softcap',
// dK += dS^T Q; then dk = scale * dK and dv = dV, written once (bitwise reproducible). Keys no
// row sees (past key_lengths included) get 0. Flags as in f32_bwd_dq_kernel.cuh.
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
    f32_bwd_dkdv_kernel(const __grid_constant__ F32BwdParams p) {
  constexpr F32Tiles cfg = bwd_dkdv_tiles(kBucket);
  constexpr int kD = cfg.head_dim, kBM = cfg.block_m, kBN = cfg.block_n;
  constexpr int TK = kBN / 16, TR = kBM / 16, TO = kD / 16;
  static_assert(TK == 2 || TK == 4, "a thread's keys share one Philox call");

  extern __shared__ __align__(16) float smem[];
  float* const k_t = smem;                                      // [kD][kBN], A (swizzled)
  float* const v_t = k_t + kD * kBN;                            // [kD][kBN], A (swizzled)
  float* const q_t = v_t + kD * kBN;                            // [kD][kBM], B
  float* const q_s = q_t + kD * kBM;                            // [kBM][kD], B
  float* const do_t = q_s + kBM * kD;                           // [kD][kBM], B
  float* const do_s = do_t + kD * kBM;                          // [kBM][kD], B
  float* const p_s = do_s + kBM * kD;                           // [kBM][kBN], A (swizzled)
  float* const ds_s = p_s + kBM * kBN;                          // [kBM][kBN], A (swizzled)
  int* const k_bad = reinterpret_cast<int*>(ds_s + kBM * kBN);  // [kBN]
  float* const lse_s = reinterpret_cast<float*>(k_bad + kBN);   // [kBM]
  float* const delta_s = lse_s + kBM;                           // [kBM]
  int* const absent_s = reinterpret_cast<int*>(delta_s + kBM);  // [kBM]

  const int tid = static_cast<int>(threadIdx.x), ty = tid / 16, tx = tid % 16;
  const int n_block = static_cast<int>(blockIdx.x % p.num_n_blocks);
  const int pair = static_cast<int>(blockIdx.x / p.num_n_blocks);
  const int hk = pair % p.heads_kv, b = pair / p.heads_kv;
  // A varlen sequence's rows (q0, k0 into the packed tensors) and lengths; a key block past a
  // shorter sequence's end holds no keys of it.
  const SequenceRows seq = sequence_rows(p, b);
  const int n0 = n_block * kBN;
  if (n0 >= seq.len_k) return;
  const int klen = key_length(p, b, seq.len_k), keys = min(kBN, klen - n0);
  const std::int64_t k_row = seq.k0 + n0;

  if (tid < kBN) k_bad[tid] = 0;
  __syncthreads();
  load_tile_kmajor<kBN, kD, true>(
      k_t,
      TileSource{static_cast<const char*>(p.k) +
                     (b * p.k_stride_b + hk * p.k_stride_h + k_row * p.k_stride_l) * 4,
                 p.k_stride_l, keys, p.dim, ElemType::f32},
      k_bad);
  load_tile_kmajor<kBN, kD, true>(
      v_t,
      TileSource{static_cast<const char*>(p.v) +
                     (b * p.v_stride_b + hk * p.v_stride_h + k_row * p.v_stride_l) * 4,
                 p.v_stride_l, keys, p.dim_v, ElemType::f32},
      k_bad);

  float acc_dk[TK][TO], acc_dv[TK][TO], comp_dk[TK][TO], comp_dv[TK][TO];
#pragma unroll
  for (int a = 0; a < TK; ++a)
#pragma unroll
    for (int o = 0; o < TO; ++o) acc_dk[a][o] = acc_dv[a][o] = comp_dk[a][o] = comp_dv[a][o] = 0.0f;
  const int dim4 = (p.dim + 3) & ~3, dim_v4 = (p.dim_v + 3) & ~3;
  const std::int64_t do_esize = p.dout_type == ElemType::f32 ? 4 : 2;
  const int m_blocks = (seq.len_q + kBM - 1) / kBM;

  for (int hh = 0; hh < p.heads_per_kv; ++hh) {
    const int h = hk * p.heads_per_kv + hh;
    const TileCoords t = tile_coords_at<kBM>(p, 0, b * p.heads_q + h);
    const std::int64_t row0 = (static_cast<std::int64_t>(b) * p.heads_q + h) * p.len_q;
    for (int m_block = 0; m_block < m_blocks; ++m_block) {
      const int m0 = m_block * kBM, rows_in = min(kBM, seq.len_q - m0);
      const std::int64_t q_row = seq.q0 + m0;
      // The block's rows see keys inside [first(top), last(bottom)) at most.
      int first_top, last_top, first_bottom, last_bottom;
      t.visible(m0, first_top, last_top);
      t.visible(m0 + rows_in - 1, first_bottom, last_bottom);
      if (first_top >= last_bottom || last_bottom <= n0 || first_top >= n0 + kBN) continue;

      __syncthreads();  // the previous step's products have read every tile
      const TileSource q_src{static_cast<const char*>(p.q) +
                                 (b * p.q_stride_b + h * p.q_stride_h + q_row * p.q_stride_l) * 4,
                             p.q_stride_l, rows_in, p.dim, ElemType::f32};
      const TileSource do_src{
          static_cast<const char*>(p.dout) +
              (b * p.do_stride_b + h * p.do_stride_h + q_row * p.do_stride_l) * do_esize,
          p.do_stride_l, rows_in, p.dim_v, p.dout_type};
      load_tile_kmajor<kBM, kD, false>(q_t, q_src, nullptr);
      load_tile_rows<kBM, kD>(q_s, q_src, nullptr);
      load_tile_kmajor<kBM, kD, false>(do_t, do_src, nullptr);
      load_tile_rows<kBM, kD>(do_s, do_src, nullptr);
      if (tid < kBM) {
        const bool in_range = tid < rows_in;
        const float lse = in_range ? p.lse_rows[row0 + m0 + tid] : -INFINITY;
        lse_s[tid] = lse;
        delta_s[tid] = in_range ? p.delta_rows[row0 + m0 + tid] : 0.0f;
        absent_s[tid] = !in_range || p.row_flags[row0 + m0 + tid] != 0 || lse == -INFINITY;
      }
      __syncthreads();

      float st[TK][TR], dpt[TK][TR];
#pragma unroll
      for (int a = 0; a < TK; ++a)
#pragma unroll
        for (int j = 0; j < TR; ++j) st[a][j] = dpt[a][j] = 0.0f;
      gemm_acc<kBN, kBM>(st, k_t, q_t, dim4, ty, tx);
      gemm_acc<kBN, kBM>(dpt, v_t, do_t, dim_v4, ty, tx);

#pragma unroll
      for (int j = 0; j < TR; ++j) {
        const int r = gemm_col<TR>(tx, j), i = m0 + r;
        const ScoreRow row = score_row(p, t, i);
        float factor[TK];
        dropout_factors<TK>(p, b, h, i, n0 + ty * TK, factor);
        const bool absent = absent_s[r] != 0;
#pragma unroll
        for (int a = 0; a < TK; ++a) {
          const int key = n0 + ty * TK + a;
          float pv = 0.0f, ds = 0.0f;
          if (!absent && key_visible(p, row, key)) {
            bool poison = k_bad[ty * TK + a] != 0;
            float dcap = 1.0f;
            const float x = poison ? 0.0f : modified_score(p, row, key, st[a][j], poison, dcap);
            if (poison) {
              atomicOr(p.row_flags + row0 + i, kRowLate);
            } else {
              const float prob = expf(x - lse_s[r]);
              pv = prob * factor[a];
              ds = prob * (dpt[a][j] * factor[a] - delta_s[r]) * dcap;
            }
          }
          st[a][j] = pv;
          dpt[a][j] = ds;
        }
      }
      store_transposed_a<kBN, kBM>(p_s, st, ty, tx);
      store_transposed_a<kBN, kBM>(ds_s, dpt, ty, tx);
      __syncthreads();
      gemm_acc_compensated<kBN, kD>(acc_dv, comp_dv, p_s, do_s, rows_in, ty, tx);
      gemm_acc_compensated<kBN, kD>(acc_dk, comp_dk, ds_s, q_s, rows_in, ty, tx);
    }
  }

  const std::int64_t dk_esize = p.dk_type == ElemType::f32 ? 4 : 2;
  const std::int64_t dv_esize = p.dv_type == ElemType::f32 ? 4 : 2;
#pragma unroll
  for (int a = 0; a < TK; ++a) {
    const int key = n0 + ty * TK + a;
    if (key >= seq.len_k) continue;
    const std::int64_t row = seq.k0 + key;
    char* const dk_row = static_cast<char*>(p.dk) +
                         (b * p.dk_stride_b + hk * p.dk_stride_h + row * p.dk_stride_l) * dk_esize;
    char* const dv_row = static_cast<char*>(p.dv) +
                         (b * p.dv_stride_b + hk * p.dv_stride_h + row * p.dv_stride_l) * dv_esize;
#pragma unroll
    for (int o = 0; o < TO; ++o) {
      const int col = gemm_col<TO>(tx, o);
      if (col < p.dim) store_elem(dk_row, col, p.dk_type, acc_dk[a][o] * p.scale);
      if (col < p.dim_v) store_elem(dv_row, col, p.dv_type, acc_dv[a][o]);
    }
  }
}

}  // namespace tileattn::cuda::f32
