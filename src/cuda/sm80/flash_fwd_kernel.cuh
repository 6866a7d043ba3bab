// FlashAttention-2-style forward for sm80+ (runs on Ampere, Ada and Hopper): one CTA owns block_m
// query rows of one (batch, head); its warps split those rows (m16 tiles), stream K/V blocks of
// block_n keys through a multi-stage cp.async pipeline into XOR-swizzled shared memory, compute
// S = Q K^T and O += P V with mma.sync m16n8k16 (ldmatrix / ldmatrix.trans fragments), and keep
// the online softmax (row max, row sum, rescale) in registers in base 2.
//
// Template parameters are the whole instantiation table: element type x head-dim bucket x
// kGeneral (softcap, ALiBi or a mask present). Causal/window/key lengths are runtime values: K/V
// blocks outside every row's visible range are skipped, and only blocks that straddle an edge
// pay for per-element masking.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/elements.cuh"
#include "cuda/common/flash_fwd_params.hpp"
#include "cuda/common/launch.cuh"
#include "cuda/common/poison.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/score_mods.cuh"
#include "cuda/common/tile_coords.cuh"
#include "cuda/sm80/tile_config.hpp"
#include "cuda/sm80/tile_io.cuh"

namespace tileattn::cuda {

template <typename T, int kBucket, bool kGeneral>
__global__ void __launch_bounds__(tile_config(kBucket).threads(), tile_config(kBucket).min_blocks)
    flash_fwd_kernel(const __grid_constant__ FlashFwdParams p) {
  constexpr TileConfig cfg = tile_config(kBucket);
  constexpr int kDim = cfg.head_dim, kPitch = cfg.smem_pitch();
  constexpr int kBlockM = cfg.block_m, kBlockN = cfg.block_n, kThreads = cfg.threads();
  constexpr int kStages = cfg.stages, kRowsPerWarp = cfg.rows_per_warp();
  constexpr int kMTiles = cfg.m_tiles();  // m16 tiles per warp
  constexpr int kNTiles = kBlockN / 8;    // n8 tiles of S per m-tile
  constexpr int kDTiles = kDim / 8;       // n8 tiles of O per m-tile
  static_assert(kRowsPerWarp % 16 == 0 && kBlockN % 16 == 0 && kDim % 16 == 0, "tile shapes");
  static_assert(kPitch % 64 == 0, "the swizzle needs 8 chunks of 16 bytes per row");
  static_assert(kStages >= 2, "pipeline");

  extern __shared__ __align__(128) unsigned char smem[];
  T* const q_tile = reinterpret_cast<T*>(smem);  // (block_m, pitch)
  T* const kv_tiles =
      q_tile + kBlockM * kPitch;  // stages x [K (block_n, pitch), V (block_n, pitch)]

  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4, t = lane % 4;

  // Heavy (late, for causal) query blocks first; blocks of one head are adjacent for L2 reuse.
  const TileCoords tile = tile_coords<kBlockM>(p);
  if (tile.rows_in_block <= 0) return;  // a varlen sequence shorter than the longest
  const int h = tile.h, b = tile.b, hk = tile.hk, m0 = tile.m0;
  const int rows_in_block = tile.rows_in_block, klen = tile.klen;
  const auto visible = [&](int i, int& first, int& last) { tile.visible(i, first, last); };
  int first_top, last_top, first_bottom, last_bottom;  // rows m0 and m0 + rows_in_block - 1
  visible(m0, first_top, last_top);
  visible(m0 + rows_in_block - 1, first_bottom, last_bottom);
  const int n_block_begin = first_top / kBlockN;
  const int n_block_end = first_top < last_bottom ? (last_bottom + kBlockN - 1) / kBlockN : 0;

  const std::int64_t esize = p.in_type == ElemType::f32 ? 4 : 2;
  const char* q_src =
      static_cast<const char*>(p.q) + (b * p.q_stride_b + h * p.q_stride_h +
                                       static_cast<std::int64_t>(tile.q0 + m0) * p.q_stride_l) *
                                          esize;
  const char* k_src =
      static_cast<const char*>(p.k) +
      (b * p.k_stride_b + hk * p.k_stride_h + static_cast<std::int64_t>(tile.k0) * p.k_stride_l) *
          esize;
  const char* v_src =
      static_cast<const char*>(p.v) +
      (b * p.v_stride_b + hk * p.v_stride_h + static_cast<std::int64_t>(tile.k0) * p.v_stride_l) *
          esize;

  auto load_kv = [&](int n_block, int slot) {
    T* k_tile = kv_tiles + slot * 2 * kBlockN * kPitch;
    T* v_tile = k_tile + kBlockN * kPitch;
    const int n0 = n_block * kBlockN, rows = min(kBlockN, klen - n0);
    load_tile<T, kBlockN, kDim, kPitch, kThreads>(k_tile, k_src + n0 * p.k_stride_l * esize,
                                                  p.k_stride_l, rows, p.dim, p.vector_loads,
                                                  p.in_type);
    load_tile<T, kBlockN, kDim, kPitch, kThreads>(v_tile, v_src + n0 * p.v_stride_l * esize,
                                                  p.v_stride_l, rows, p.dim_v, p.vector_loads,
                                                  p.in_type);
  };

  // Prologue: Q and the first stages - 1 K/V blocks, one commit group per block.
  load_tile<T, kBlockM, kDim, kPitch, kThreads>(q_tile, q_src, p.q_stride_l, rows_in_block, p.dim,
                                                p.vector_loads, p.in_type);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (n_block_begin + s < n_block_end) load_kv(n_block_begin + s, s);
    cp_async_commit();
  }

  // This thread's query rows: m-tile mt, half hh (rows g and g + 8 of the m16 tile). Their
  // visible ranges are recomputed in edge blocks rather than held in registers.
  const int warp_row0 = warp * kRowsPerWarp;

  float acc_o[kMTiles][kDTiles][4];                // (rows_per_warp, head_dim) in C fragments
  float row_max[kMTiles][2], row_sum[kMTiles][2];  // base-2 running max; partial sums (this lane)
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[mt][dt][e] = 0.0f;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      row_max[mt][hh] = -INFINITY;
      row_sum[mt][hh] = 0.0f;
    }
  }

  // Without score modifications and with 0 < scale log2 e <= 1 the softmax can work on the raw
  // scores (cfg.fold_scale): their maximum is taken before scaling and the scale is folded into
  // the exponent's FFMA, so that making a non-finite score NaN costs one instruction per score
  // and the scaling none (a finite raw score cannot leave f32's range when scaled by at most 1).
  // Other kernels and scales work on scaled scores (exp_scale 1).
  const bool fold_scale =
      cfg.fold_scale && !kGeneral && p.scale_log2 > 0.0f && p.scale_log2 <= 1.0f;
  const float exp_scale = fold_scale ? p.scale_log2 : 1.0f;

  // Per-lane ldmatrix source rows/chunks (see ptx.cuh for the fragment layouts).
  const int mat = lane / 8, mat_row = lane % 8;
  const int q_row = warp_row0 + mat_row + (mat & 1) * 8, q_chunk = mat >> 1;  // A: Q
  const int k_row = mat_row + (mat >> 1) * 8, k_chunk = mat & 1;              // B: K
  const int v_row = mat_row + (mat & 1) * 8, v_chunk = mat >> 1;              // B: V (trans)

  for (int n_block = n_block_begin, it = 0; n_block < n_block_end; ++n_block, ++it) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // block n_block landed for all threads; slot (it - 1) % stages is free
    if (n_block + kStages - 1 < n_block_end)
      load_kv(n_block + kStages - 1, (it + kStages - 1) % kStages);
    cp_async_commit();

    T* const k_tile = kv_tiles + (it % kStages) * 2 * kBlockN * kPitch;
    T* const v_tile = k_tile + kBlockN * kPitch;
    const int n0 = n_block * kBlockN;

    // A block where some row cannot see some key: clean poisoned V rows first (poison.cuh).
    // The condition is the same for the whole CTA.
    const bool has_mask = kGeneral && p.mask != nullptr;
    if (has_mask || n0 < first_bottom || n0 + kBlockN > last_top) {
      constexpr int kChunks = kDim / 8;
      for (int idx = static_cast<int>(threadIdx.x); idx < kBlockN * kChunks; idx += kThreads) {
        const int row = idx / kChunks;
        if (clear_nonfinite_chunk<T>(v_tile + swizzled<kPitch>(row, idx % kChunks)))
          k_tile[swizzled<kPitch>(row, 0)] = nan_element<T>();
      }
      __syncthreads();
    }

    // S = Q K^T                                                   // (rows_per_warp, block_n)
    float s[kMTiles][kNTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kDim / 16; ++ks) {
      std::uint32_t a[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
        ldmatrix_x4(a[mt],
                    smem_address(q_tile + swizzled<kPitch>(q_row + mt * 16, ks * 2 + q_chunk)));
#pragma unroll
      for (int np = 0; np < kNTiles / 2; ++np) {
        std::uint32_t kb[4];
        ldmatrix_x4(kb, smem_address(k_tile + swizzled<kPitch>(k_row + np * 16, ks * 2 + k_chunk)));
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          mma_16816<T>(s[mt][2 * np], a[mt], kb[0], kb[1]);
          mma_16816<T>(s[mt][2 * np + 1], a[mt], kb[2], kb[3]);
        }
      }
    }

    // Score modifications, in base-2 units (x = score * log2 e; raw scores where fold_scale),
    // -inf where masked; a non-finite (scaled) score becomes NaN first (poison.cuh).
    if constexpr (kGeneral) {
      const float slope = alibi_slope(p, b, h);
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          GeneralScoreRow r;
          r.i = m0 + warp_row0 + mt * 16 + g + 8 * hh;
          r.slope = slope;
          r.mask_row = mask_row_offset(p, b, h, r.i);
          r.distance0 = r.i + klen - tile.len_q;
          visible(r.i, r.first, r.last);
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              float& x = s[mt][nt][2 * hh + e];
              x = general_score_log2(p, r, n0 + nt * 8 + 2 * t + e, x);
            }
        }
    } else {
      if (fold_scale) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mt][nt][e] = as_score_or_nan(s[mt][nt][e]);
      } else {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mt][nt][e] = as_score_or_nan(s[mt][nt][e] * p.scale_log2);
      }
      if (n0 < first_bottom || n0 + kBlockN > last_top) {  // a block on a window/length edge
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            int first, last;
            visible(m0 + warp_row0 + mt * 16 + g + 8 * hh, first, last);
            first -= n0 + 2 * t;  // compare against the column offset within this lane's tile
            last -= n0 + 2 * t;
            mask_row_outside<0, kNTiles>(s[mt], hh, first, last);
          }
      }
    }

    // Online softmax: new row max over the quad, rescale the running sum and O, P = 2^(x - max).
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float block_max = -INFINITY;  // in the scores' units (raw where fold_scale)
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
          block_max = fmaxf(block_max, fmaxf(s[mt][nt][2 * hh], s[mt][nt][2 * hh + 1]));
        block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 1));
        block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 2));
        block_max = fmaxf(row_max[mt][hh], block_max * exp_scale);     // base-2 units
        const float base = block_max == -INFINITY ? 0.0f : block_max;  // all masked so far
        const float rescale = exp2_approx(row_max[mt][hh] - base);
        row_max[mt][hh] = block_max;
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& x = s[mt][nt][2 * hh + e];
            x = exp2_approx(fmaf(x, exp_scale, -base));
            sum += x;
          }
        row_sum[mt][hh] = row_sum[mt][hh] * rescale + sum;
        if constexpr (kGeneral) {
          if (p.dropout_threshold != 0) {
#pragma unroll
            for (int nt = 0; nt < kNTiles; ++nt)
              apply_dropout_pair(p, b, h, m0 + warp_row0 + mt * 16 + g + 8 * hh,
                                 n0 + nt * 8 + 2 * t, s[mt][nt][2 * hh], s[mt][nt][2 * hh + 1]);
          }
        }
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt) {
          acc_o[mt][dt][2 * hh] *= rescale;
          acc_o[mt][dt][2 * hh + 1] *= rescale;
        }
      }

      // O += P V: P's C fragments of two n8 tiles are the A fragment of one k16 step.
#pragma unroll
    for (int ks = 0; ks < kBlockN / 16; ++ks) {
      std::uint32_t pa[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        pa[mt][0] = MmaType<T>::pack(s[mt][2 * ks][0], s[mt][2 * ks][1]);
        pa[mt][1] = MmaType<T>::pack(s[mt][2 * ks][2], s[mt][2 * ks][3]);
        pa[mt][2] = MmaType<T>::pack(s[mt][2 * ks + 1][0], s[mt][2 * ks + 1][1]);
        pa[mt][3] = MmaType<T>::pack(s[mt][2 * ks + 1][2], s[mt][2 * ks + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < kDTiles / 2; ++dp) {
        std::uint32_t vb[4];
        ldmatrix_x4_trans(
            vb, smem_address(v_tile + swizzled<kPitch>(v_row + ks * 16, dp * 2 + v_chunk)));
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          mma_16816<T>(acc_o[mt][2 * dp], pa[mt], vb[0], vb[1]);
          mma_16816<T>(acc_o[mt][2 * dp + 1], pa[mt], vb[2], vb[3]);
        }
      }
    }
  }
  cp_async_wait<0>();

  // Epilogue: O / l (0 for a fully masked row), lse = ln(sum) = (max + log2 l) ln 2 (-inf if
  // empty); NaN for a poisoned row.
  char* out_base = static_cast<char*>(p.out);
  const std::int64_t out_esize = p.out_type == ElemType::f32 ? 4 : 2;
  out_base +=
      (b * p.o_stride_b + h * p.o_stride_h + static_cast<std::int64_t>(tile.q0) * p.o_stride_l) *
      out_esize;
  float* const lse_base = p.lse == nullptr
                              ? nullptr
                              : p.lse + b * p.lse_stride_b + h * p.lse_stride_h +
                                    static_cast<std::int64_t>(tile.q0) * p.lse_stride_l;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float l = row_sum[mt][hh], check = 0.0f;
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt)
        check = fmaf(acc_o[mt][dt][2 * hh], 0.0f, fmaf(acc_o[mt][dt][2 * hh + 1], 0.0f, check));
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      check += __shfl_xor_sync(0xffffffffu, check, 1);
      check += __shfl_xor_sync(0xffffffffu, check, 2);
      const int i = m0 + warp_row0 + mt * 16 + g + 8 * hh;
      if (i >= tile.len_q) continue;
      const bool poisoned = row_poisoned(l, check);
      const float inv = poisoned ? NAN : (l > 0.0f ? 1.0f / l : 0.0f);
      void* out_row = out_base + static_cast<std::int64_t>(i) * p.o_stride_l * out_esize;
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        const int col = dt * 8 + 2 * t;
        if (col < p.dim_v) store_elem(out_row, col, p.out_type, acc_o[mt][dt][2 * hh] * inv);
        if (col + 1 < p.dim_v)
          store_elem(out_row, col + 1, p.out_type, acc_o[mt][dt][2 * hh + 1] * inv);
      }
      if (lse_base != nullptr && t == 0)
        lse_base[i * p.lse_stride_l] =
            poisoned ? NAN : (l > 0.0f ? (row_max[mt][hh] + __log2f(l)) * kLn2 : -INFINITY);
    }
}

// Launches one instantiation on `stream`; returns the launch status (no synchronisation).
template <typename T, int kBucket, bool kGeneral>
cudaError_t launch_flash_fwd(const FlashFwdParams& p, cudaStream_t stream) {
  constexpr TileConfig cfg = tile_config(kBucket);
  return launch_over_query_blocks(&flash_fwd_kernel<T, kBucket, kGeneral>, cfg, p, p, stream);
}

}  // namespace tileattn::cuda
