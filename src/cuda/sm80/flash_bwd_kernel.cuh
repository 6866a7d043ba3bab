// FlashAttention-2-style backward for sm80+ (mma.sync m16n8k16), three kernels per call:
//   1. flash_bwd_prepare (cuda/common/bwd_prepare_convert.cuh): per query row, delta =
//      rowsum(dO o O) and lse * log2(e) (+inf for a row with no visible key, so its recomputed
//      probabilities are 0), into the workspace.
//   2. flash_bwd_kernel: one CTA per (key block, column chunk, kv head, batch). Each warp owns 16
//      keys and keeps them in the mma's M dimension: S^T = K Q^T, P^T = 2^(S^T log2e scale - lse),
//      dV += P^T dO, dP^T = V dO^T, dS^T = P^T o (dP^T - delta), dK += dS^T Q. P^T and dS^T are C
//      fragments that serve directly as the A operand of the next GEMM. dS^T also goes to shared
//      memory, from which dQ = dS K (scaled later) is summed into an f32 workspace with atomics.
//      GQA: the CTA visits every query head of its kv head, so dK and dV sum in registers.
//   3. flash_bwd_convert_dq (the same file): dq = scale * workspace, in dq's dtype and layout.
// The scale is applied once: dK at the end of kernel 2, dQ in kernel 3.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/common/bwd_cta_order.cuh"
#include "cuda/common/bwd_epilogue.cuh"
#include "cuda/common/bwd_prepare_convert.cuh"
#include "cuda/common/bwd_visibility.cuh"
#include "cuda/common/dq_layout.cuh"
#include "cuda/common/elements.cuh"
#include "cuda/common/flash_bwd_params.hpp"
#include "cuda/common/launch.cuh"
#include "cuda/common/poison.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/score_mods.cuh"
#include "cuda/common/tile_coords.cuh"
#include "cuda/sm80/flash_bwd_kernel_2d.cuh"
#include "cuda/sm80/tile_config.hpp"
#include "cuda/sm80/tile_io.cuh"

namespace tileattn::cuda {

template <typename T, int kBucket, bool kGeneral>
__global__ void __launch_bounds__(bwd_tile_config(kBucket).threads(),
                                  bwd_tile_config(kBucket).min_blocks)
    flash_bwd_kernel(const __grid_constant__ FlashBwdParams p) {
  constexpr BwdTileConfig cfg = bwd_tile_config(kBucket);
  constexpr int kDim = cfg.head_dim, kPitch = cfg.head_dim, kDsPitch = cfg.ds_pitch();
  constexpr int kBlockM = cfg.block_m, kBlockN = cfg.block_n(), kThreads = cfg.threads();
  constexpr int kWarps = cfg.warps, kAcc = cfg.acc_dim, kChunks = cfg.chunks();
  constexpr int kQTiles = kBlockM / 8;  // n8 tiles of S^T / dP^T per warp (query columns)
  constexpr int kAccTiles = kAcc / 8;   // n8 tiles of this CTA's dK / dV columns
  // dQ (block_m x acc_dim) = dS K on a kDqWarpsM x kDqWarpsN warp grid, 32 columns per warp.
  constexpr int kDqWarpsN = kWarps < kAcc / 32 ? kWarps : kAcc / 32;
  constexpr int kDqWarpsM = kWarps / kDqWarpsN;
  constexpr int kDqRows = kBlockM / kDqWarpsM, kDqCols = kAcc / kDqWarpsN;
  constexpr int kDqMTiles = kDqRows / 16, kDqNTiles = kDqCols / 8;
  static_assert(kDim % 64 == 0 && kBlockM % 16 == 0 && kAcc % 16 == 0, "tile shapes");
  static_assert(kDqRows % 16 == 0 && kDqCols == 32 && kDqWarpsM * kDqWarpsN == kWarps,
                "dQ warp grid");
  static_assert(kQTiles * 4 <= 64, "the dropout keep bits of one step fit one word");

  extern __shared__ __align__(128) unsigned char smem[];
  T* const k_tile = reinterpret_cast<T*>(smem);             // (block_n, pitch)
  T* const v_tile = k_tile + kBlockN * kPitch;              // (block_n, pitch)
  T* const qdo_tiles = v_tile + kBlockN * kPitch;           // 2 stages x [Q, dO] (block_m, pitch)
  T* const ds_tile = qdo_tiles + 2 * 2 * kBlockM * kPitch;  // dS^T (block_n, ds_pitch)
  float* const row_stats =
      reinterpret_cast<float*>(ds_tile + kBlockN * kDsPitch);  // 2 stages x [lse_log2, delta]

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  const int mat = lane / 8, mat_row = lane % 8;

  const BwdCta cta = bwd_cta_at(static_cast<int>(blockIdx.x), p.num_n_blocks,
                                kChunks * p.heads_kv * p.batch, p.cta_section_pairs);
  const int n_block = cta.n_block, chunk = cta.pair % kChunks;
  const int hk = cta.pair / kChunks % p.heads_kv, b = cta.pair / kChunks / p.heads_kv;
  const int n0 = n_block * kBlockN;
  // A varlen sequence's rows (q0, k0 into the packed tensors) and lengths; a key block past a
  // shorter sequence's end holds no keys of it.
  const SequenceRows seq = sequence_rows(p, b);
  if (n0 >= seq.len_k) return;
  const int klen = key_length(p, b, seq.len_k);
  const std::int64_t diagonal = p.bottom_right ? klen - seq.len_q : 0;

  const QueryBlockRange seen =
      query_blocks_seeing<kBlockM, kBlockN>(p, seq.len_q, n0, klen, diagonal);
  const int m_begin = seen.begin, m_end = seen.end;
  const int m_blocks = m_end - m_begin;
  const int n_iters = m_blocks * p.heads_per_kv;

  const std::int64_t esize = p.in_type == ElemType::f32 ? 4 : 2;
  const std::int64_t do_esize = p.dout_type == ElemType::f32 ? 4 : 2;
  // Step it visits query block m0 / kBlockM of query head h; the steps run through the query
  // blocks of each of the kv head's query heads in turn, so the next step's (h, m0) follows from
  // the current one without dividing by m_blocks.
  struct Step {
    int h, m0;
  };
  const int m0_begin = m_begin * kBlockM, m0_end = m_end * kBlockM;
  const auto step_after = [&](Step s) {
    s.m0 += kBlockM;
    if (s.m0 == m0_end) {
      s.m0 = m0_begin;
      ++s.h;
    }
    return s;
  };
  const Step first_step{hk * p.heads_per_kv, m0_begin};
  // A step's copies: Q and dO (TileCopyLanes: the per-thread index arithmetic without divisions)
  // and, by threads below kStatsCopies, one 16-byte chunk each of lse_log2 or delta.
  using QdoCopy = TileCopyLanes<T, kBlockM, kDim, kPitch, kThreads>;
  constexpr int kStatsCopies = 2 * kBlockM / 4;
  static_assert(kStatsCopies <= kThreads, "one lse / delta copy per thread at most");
  const auto load_step = [&](Step s, int stage) {
    const int rows = min(kBlockM, seq.len_q - s.m0);
    T* q_s = qdo_tiles + stage * 2 * kBlockM * kPitch;
    T* do_s = q_s + kBlockM * kPitch;
    const std::int64_t q_row = seq.q0 + s.m0;
    const char* q_src = static_cast<const char*>(p.q) +
                        (b * p.q_stride_b + s.h * p.q_stride_h + q_row * p.q_stride_l) * esize;
    const char* do_src =
        static_cast<const char*>(p.dout) +
        (b * p.do_stride_b + s.h * p.do_stride_h + q_row * p.do_stride_l) * do_esize;
    const QdoCopy qdo_copy(threadIdx.x);
    if (p.vector_loads)
      qdo_copy.copy(smem_address(q_s), reinterpret_cast<const T*>(q_src), p.q_stride_l, rows,
                    p.dim);
    else
      load_tile_elements<T, kBlockM, kDim, kPitch, kThreads>(q_s, q_src, p.q_stride_l, rows, p.dim,
                                                             p.in_type);
    if (p.dout_vector_loads)
      qdo_copy.copy(smem_address(do_s), reinterpret_cast<const T*>(do_src), p.do_stride_l, rows,
                    p.dim_v);
    else
      load_tile_elements<T, kBlockM, kDim, kPitch, kThreads>(do_s, do_src, p.do_stride_l, rows,
                                                             p.dim_v, p.dout_type);
    if (tid < kStatsCopies) {
      const unsigned which = threadIdx.x / (kBlockM / 4), c = threadIdx.x % (kBlockM / 4) * 4;
      const std::int64_t stats_row =
          (static_cast<std::int64_t>(b) * p.heads_q + s.h) * p.len_q_padded + s.m0;
      cp_async_16(smem_address(row_stats + (stage * 2 + which) * kBlockM + c),
                  (which == 0 ? p.lse_log2 : p.delta) + stats_row + c, 16);
    }
  };

  // Prologue: this CTA's K and V (kept for the whole loop) and the first query step.
  {
    const int rows = max(0, min(kBlockN, seq.len_k - n0));
    const std::int64_t k_row = seq.k0 + n0;
    const char* k_src = static_cast<const char*>(p.k) +
                        (b * p.k_stride_b + hk * p.k_stride_h + k_row * p.k_stride_l) * esize;
    const char* v_src = static_cast<const char*>(p.v) +
                        (b * p.v_stride_b + hk * p.v_stride_h + k_row * p.v_stride_l) * esize;
    load_tile<T, kBlockN, kDim, kPitch, kThreads>(k_tile, k_src, p.k_stride_l, rows, p.dim,
                                                  p.vector_loads, p.in_type);
    load_tile<T, kBlockN, kDim, kPitch, kThreads>(v_tile, v_src, p.v_stride_l, rows, p.dim_v,
                                                  p.vector_loads, p.in_type);
    if (n_iters > 0) load_step(first_step, 0);
    cp_async_commit();
  }

  // This thread's key rows j = n0 + warp * 16 + g + 8 hh and which query rows see them.
  const int key_row0 = warp * 16 + g;
  // The non-finite rules (cuda/common/poison.cuh): this warp zeroes its 16 key rows of K and V
  // that hold a non-finite element (other warps read them only in the first step's dQ, after
  // its barriers).
  if (n_iters > 0) {
    cp_async_wait<0>();
    __syncthreads();  // K and V landed (each thread copied chunks of every warp's rows)
    clear_nonfinite_keys<T, kDim>(k_tile, v_tile, warp * 16, 16,
                                  [](T* tile, int r, int c) { return tile + r * kPitch + c * 8; });
  }
  const KeyRowVisibility seen_by[2] = {
      KeyRowVisibility(p, seq.len_q, n0 + key_row0, klen, diagonal),
      KeyRowVisibility(p, seq.len_q, n0 + key_row0 + 8, klen, diagonal)};
  const LaneColumnMask<kQTiles> seen_mask[2] = {LaneColumnMask<kQTiles>(seen_by[0]),
                                                LaneColumnMask<kQTiles>(seen_by[1])};
  // ldmatrix lanes: A of a warp's 16 key rows (K, V); B from (query, d) tiles, plain (Q, dO as
  // the n operand) or transposed (Q, dO, K as the k operand); A transposed from dS^T.
  const int a_row = warp * 16 + mat_row + (mat & 1) * 8, a_chunk = mat >> 1;
  const int b_row = mat_row + (mat >> 1) * 8, b_chunk = mat & 1;
  const int bt_row = mat_row + (mat & 1) * 8, bt_chunk = mat >> 1;
  const int chunk0 = chunk * kAcc / 8;  // first 16-byte chunk of this CTA's dK/dV columns
  const int wm = warp / kDqWarpsN, wn = warp % kDqWarpsN;  // this warp's dQ tile
  // Swizzled chunk offsets (every ldmatrix row here is mat_row mod 8).
  const SwizzleTable<4> sw_a(0, a_chunk, mat_row), sw_b(0, b_chunk, mat_row),
      sw_bt(chunk0, bt_chunk, mat_row);
  const SwizzleTable<kDqNTiles / 2> sw_k(chunk0 + wn * kDqCols / 8, bt_chunk, mat_row);
  const SwizzleTable<kDqMTiles> sw_ds(wm * kDqRows / 8, mat & 1, mat_row);
  const std::uint32_t k_base = smem_address(k_tile), v_base = smem_address(v_tile);
  const std::uint32_t ds_base = smem_address(ds_tile);
  unsigned char* const ds_bytes = reinterpret_cast<unsigned char*>(ds_tile);
  constexpr int kRowBytes = kPitch * 2;

  float acc_dk[kAccTiles][4], acc_dv[kAccTiles][4];
#pragma unroll
  for (int dt = 0; dt < kAccTiles; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_dk[dt][e] = acc_dv[dt][e] = 0.0f;

  Step step = first_step;
  for (int it = 0; it < n_iters; ++it, step = step_after(step)) {
    cp_async_wait<0>();
    __syncthreads();  // step it landed; every warp is done with step it - 1 and with dS^T
    if (it + 1 < n_iters) load_step(step_after(step), (it + 1) & 1);
    cp_async_commit();

    const int h = step.h, m0 = step.m0;
    const std::uint32_t q_base = smem_address(qdo_tiles + (it & 1) * 2 * kBlockM * kPitch);
    const std::uint32_t do_base = q_base + kBlockM * kRowBytes;
    const float* lse_s = row_stats + (it & 1) * 2 * kBlockM;
    const float* delta_s = lse_s + kBlockM;

    // S^T = K Q^T (this warp's 16 keys x block_m queries).
    float s[kQTiles][4];
#pragma unroll
    for (int nt = 0; nt < kQTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kDim / 16; ++ks) {
      std::uint32_t a[4];
      ldmatrix_x4(a, k_base + a_row * kRowBytes + sw_a.periodic(ks));
#pragma unroll
      for (int np = 0; np < kQTiles / 2; ++np) {
        std::uint32_t qb[4];
        ldmatrix_x4(qb, q_base + (b_row + np * 16) * kRowBytes + sw_b.periodic(ks));
        mma_16816<T>(s[2 * np], a, qb[0], qb[1]);
        mma_16816<T>(s[2 * np + 1], a, qb[2], qb[3]);
      }
    }

    // P^T = 2^(logit - lse log2 e); masked elements and rows without keys give 0 (also for a
    // poisoned row, whose lse_log2 the prepare set to NaN).
    [[maybe_unused]] float softcap_grad[kGeneral ? kQTiles : 1][4];
    [[maybe_unused]] std::uint64_t kept = ~0ull;  // dropout: bit nt * 4 + element
    // Fast path: which of this lane's elements its key rows see (every block is masked, interior
    // ones too: a branch that skipped them cost more than the bit tests).
    [[maybe_unused]] unsigned seen_bits[2] = {0u, 0u};
    if constexpr (!kGeneral)
      for (int hh = 0; hh < 2; ++hh) seen_bits[hh] = seen_mask[hh].bits(m0 + 2 * t);
    [[maybe_unused]] float slope = 0.0f;
    if constexpr (kGeneral) slope = alibi_slope(p, b, h);
#pragma unroll
    for (int nt = 0; nt < kQTiles; ++nt) {
      // lse * log2(e) of this lane's two query columns (one 8-byte shared load).
      const float2 lse2 = *reinterpret_cast<const float2*>(lse_s + nt * 8 + 2 * t);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int hh = e / 2, i = m0 + nt * 8 + 2 * t + (e & 1);
        const float lse = (e & 1) ? lse2.y : lse2.x;
        if constexpr (kGeneral) {
          const int j = n0 + key_row0 + 8 * hh;
          float x = -INFINITY;
          softcap_grad[nt][e] = 1.0f;
          if (seen_by[hh].sees(i)) {
            GeneralScoreRow r;
            r.i = i;
            r.slope = slope;
            r.mask_row = mask_row_offset(p, b, h, i);
            r.first = 0;
            r.last = INT_MAX;
            r.distance0 = i + klen - seq.len_q;
            x = general_score_log2(p, r, j, s[nt][e], softcap_grad[nt][e]);
            if (p.dropout_threshold != 0 && x != -INFINITY && !dropout_keeps(p, b, h, i, j))
              kept &= ~(1ull << (nt * 4 + e));
          }
          s[nt][e] = x == -INFINITY ? 0.0f : exp2_approx(x - lse);
        } else {
          s[nt][e] = exp2_approx(fmaf(s[nt][e], p.scale_log2, -lse));
          if (!(seen_bits[hh] >> (2 * nt + (e & 1)) & 1u)) s[nt][e] = 0.0f;
        }
      }
    }

    // dV += P^T dO (dropped probabilities scaled by 1 / (1 - p)).
#pragma unroll
    for (int ks = 0; ks < kBlockM / 16; ++ks) {
      float pd[2][4];
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          pd[n][e] = s[2 * ks + n][e];
          if constexpr (kGeneral) {
            if (p.dropout_threshold != 0)
              // (A dropped element keeps its NaN, as P times 0, for a poisoned row's dV.)
              pd[n][e] = (kept >> ((2 * ks + n) * 4 + e) & 1u) ? pd[n][e] * p.dropout_keep_scale
                                                               : pd[n][e] * 0.0f;
          }
        }
      const std::uint32_t pa[4] = {
          MmaType<T>::pack(pd[0][0], pd[0][1]), MmaType<T>::pack(pd[0][2], pd[0][3]),
          MmaType<T>::pack(pd[1][0], pd[1][1]), MmaType<T>::pack(pd[1][2], pd[1][3])};
#pragma unroll
      for (int dp = 0; dp < kAccTiles / 2; ++dp) {
        std::uint32_t vb[4];
        ldmatrix_x4_trans(vb, do_base + (bt_row + ks * 16) * kRowBytes + sw_bt.periodic(dp));
        mma_16816<T>(acc_dv[2 * dp], pa, vb[0], vb[1]);
        mma_16816<T>(acc_dv[2 * dp + 1], pa, vb[2], vb[3]);
      }
    }

    // dP^T = V dO^T.
    float dp[kQTiles][4];
#pragma unroll
    for (int nt = 0; nt < kQTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) dp[nt][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kDim / 16; ++ks) {
      std::uint32_t a[4];
      ldmatrix_x4(a, v_base + a_row * kRowBytes + sw_a.periodic(ks));
#pragma unroll
      for (int np = 0; np < kQTiles / 2; ++np) {
        std::uint32_t ob[4];
        ldmatrix_x4(ob, do_base + (b_row + np * 16) * kRowBytes + sw_b.periodic(ks));
        mma_16816<T>(dp[2 * np], a, ob[0], ob[1]);
        mma_16816<T>(dp[2 * np + 1], a, ob[2], ob[3]);
      }
    }

    // dS^T = P^T o (dP^T - delta) (dropout: dP^T of the dropped elements is 0, kept ones scaled;
    // softcap: times its derivative), into s; also stored to shared memory for dQ.
#pragma unroll
    for (int nt = 0; nt < kQTiles; ++nt) {
      const float2 delta2 = *reinterpret_cast<const float2*>(delta_s + nt * 8 + 2 * t);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float d = dp[nt][e];
        if constexpr (kGeneral) {
          if (p.dropout_threshold != 0)
            d = (kept >> (nt * 4 + e) & 1u) ? d * p.dropout_keep_scale : 0.0f;
        }
        float ds = s[nt][e] * (d - ((e & 1) ? delta2.y : delta2.x));
        if constexpr (kGeneral) ds *= softcap_grad[nt][e];
        s[nt][e] = ds;
      }
    }
    {
      // This lane's bytes of column chunk 0 in its key rows of dS^T; chunk nt's are these XOR
      // nt * 16 (the swizzle XORs the chunk index with the row's g, which lies in other bits than
      // the row and the lane's 4 bytes: kQTiles * 16 <= a row's bytes). From the thread index
      // read here, so ptxas derives the addresses per store (one LOP3 each) instead of holding
      // one register per chunk across the loop.
      static_assert(kQTiles * 16 <= kDsPitch * 2, "the chunk bits stay inside a dS^T row");
      // (Unsigned: the divisions are shifts, without a signed division's rounding fix-up.)
      const unsigned tid_now = static_cast<unsigned>(thread_index_now());
      const unsigned row_now = tid_now / 32 * 16 + tid_now % 32 / 4;
      const std::uint32_t lane_bytes =
          static_cast<std::uint32_t>(swizzled<kDsPitch>(static_cast<int>(row_now), 0) +
                                     2 * static_cast<int>(tid_now % 4)) *
          2;
#pragma unroll
      for (int nt = 0; nt < kQTiles; ++nt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh)
          *reinterpret_cast<std::uint32_t*>(ds_bytes + hh * 8 * kDsPitch * 2 +
                                            (lane_bytes ^ (nt << 4))) =
              MmaType<T>::pack(s[nt][2 * hh], s[nt][2 * hh + 1]);
    }

    // dK += dS^T Q.
#pragma unroll
    for (int ks = 0; ks < kBlockM / 16; ++ks) {
      const std::uint32_t da[4] = {MmaType<T>::pack(s[2 * ks][0], s[2 * ks][1]),
                                   MmaType<T>::pack(s[2 * ks][2], s[2 * ks][3]),
                                   MmaType<T>::pack(s[2 * ks + 1][0], s[2 * ks + 1][1]),
                                   MmaType<T>::pack(s[2 * ks + 1][2], s[2 * ks + 1][3])};
#pragma unroll
      for (int dq = 0; dq < kAccTiles / 2; ++dq) {
        std::uint32_t qb[4];
        ldmatrix_x4_trans(qb, q_base + (bt_row + ks * 16) * kRowBytes + sw_bt.periodic(dq));
        mma_16816<T>(acc_dk[2 * dq], da, qb[0], qb[1]);
        mma_16816<T>(acc_dk[2 * dq + 1], da, qb[2], qb[3]);
      }
    }
    __syncthreads();  // dS^T complete

    // dQ (this warp's kDqRows x kDqCols) = dS K, added to the workspace.
    {
      float acc_dq[kDqMTiles][kDqNTiles][4];
#pragma unroll
      for (int mt = 0; mt < kDqMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < kDqNTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc_dq[mt][nt][e] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < kBlockN / 16; ++ks) {
        std::uint32_t a[kDqMTiles][4];
#pragma unroll
        for (int mt = 0; mt < kDqMTiles; ++mt)
          ldmatrix_x4_trans(
              a[mt], ds_base + (ks * 16 + (mat >> 1) * 8 + mat_row) * kDsPitch * 2 + sw_ds.x[mt]);
#pragma unroll
        for (int np = 0; np < kDqNTiles / 2; ++np) {
          std::uint32_t kb[4];
          ldmatrix_x4_trans(kb, k_base + (ks * 16 + bt_row) * kRowBytes + sw_k.x[np]);
#pragma unroll
          for (int mt = 0; mt < kDqMTiles; ++mt) {
            mma_16816<T>(acc_dq[mt][2 * np], a[mt], kb[0], kb[1]);
            mma_16816<T>(acc_dq[mt][2 * np + 1], a[mt], kb[2], kb[3]);
          }
        }
      }
      int* turn = nullptr;
      if (p.dq_turn != nullptr) {  // deterministic: wait until the earlier key blocks added theirs
        const int m_block = m0 / kBlockM;
        turn =
            p.dq_turn +
            ((static_cast<std::int64_t>(b) * p.heads_q + h) * p.num_m_blocks + m_block) * kChunks +
            chunk;
        const int my_turn = n_block - first_key_block_seen<kBlockM, kBlockN>(p, m_block, diagonal);
        if (tid == 0)
          while (load_acquire(turn) != my_turn) __nanosleep(32);
        __syncthreads();
      }
      // This lane's first dQ element (row m0 + wm * kDqRows + g, column chunk * kAcc + wn *
      // kDqCols + 2t); every tile's elements are constant offsets from it, and the bounds
      // checks compare those offsets with the rows and columns left.
      const int lane_row = m0 + wm * kDqRows + g, lane_col = chunk * kAcc + wn * kDqCols + 2 * t;
      float* const dq_rows =
          p.dq_accum + (static_cast<std::int64_t>(b) * p.heads_q + h) * p.len_q_padded * kDim;
#if __CUDA_ARCH__ >= 900
      // Lanes t and t ^ 1 trade halves: even t adds row g, columns 2t..2t+3 and odd t row g + 8,
      // columns 2t-2..2t+1, as one 16-byte vector reduction each (columns past dim land in the
      // workspace's padding, which nothing reads).
      const bool odd = (t & 1) != 0;
      const int row = lane_row + (odd ? 8 : 0), col = lane_col - (odd ? 2 : 0);
      const int rows_left = p.len_q - row, cols_left = p.dim - col;
      float* const dq_lane = dq_rows + static_cast<std::int64_t>(row) * kDim + col;
#pragma unroll
      for (int mt = 0; mt < kDqMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < kDqNTiles; ++nt) {
          const float* c = acc_dq[mt][nt];
          const float send0 = odd ? c[0] : c[2], send1 = odd ? c[1] : c[3];
          const float got0 = __shfl_xor_sync(0xffffffffu, send0, 1);
          const float got1 = __shfl_xor_sync(0xffffffffu, send1, 1);
          red_add_v4_if(mt * 16 < rows_left && nt * 8 < cols_left,
                        dq_lane + mt * 16 * kDim + nt * 8, odd ? got0 : c[0], odd ? got1 : c[1],
                        odd ? c[2] : got0, odd ? c[3] : got1);
        }
#else
      const int rows_left = p.len_q - lane_row, cols_left = p.dim - lane_col;
      float* const dq_lane = dq_rows + static_cast<std::int64_t>(lane_row) * kDim + lane_col;
#pragma unroll
      for (int mt = 0; mt < kDqMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < kDqNTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int di = mt * 16 + 8 * (e / 2), dd = nt * 8 + (e & 1);
            if (di < rows_left && dd < cols_left)
              atomicAdd(dq_lane + di * kDim + dd, acc_dq[mt][nt][e]);
          }
#endif
      if (turn != nullptr) {  // pass the turn on once every thread's adds are done
        __threadfence();
        __syncthreads();
        if (tid == 0) atomicAdd(turn, 1);
      }
    }
  }
  cp_async_wait<0>();

  // Epilogue (zeros for keys that no query sees).
  store_dk_dv_rows(p, acc_dk, acc_dv, KeyRows{b, seq.k0, seq.len_k}, hk, n0 + key_row0,
                   chunk * kAcc, t);
}

// Enqueues the three kernels of one backward call on `stream` (the workspace in p is allocated;
// the prepare kernel zeroes dq_accum); returns the first launch error.
template <typename T, int kBucket, bool kGeneral>
cudaError_t launch_flash_bwd(const FlashBwdParams& p, cudaStream_t stream) {
  constexpr BwdTileConfig cfg = bwd_tile_config(kBucket);
  cudaError_t status = launch_flash_bwd_prepare<T>(p, stream);
  if (status != cudaSuccess) return status;
  const std::int64_t ctas =
      static_cast<std::int64_t>(p.num_n_blocks) * cfg.chunks() * p.heads_kv * p.batch;
  if (ctas > 0) {
    FlashBwdParams ordered = p;
    ordered.cta_section_pairs = bwd_section_pairs_for(p, cfg.chunks(), kBucket);
    // The fast path outside deterministic mode: the 2-D warp tiles where the table asks for them.
    bool two_d = false;
    constexpr int kTwoDDim = kBucket <= 128 ? kBucket : 128;  // (no 2-D kernel at D 256)
    static_assert(kBucket <= 128 || !cfg.two_d_fast_path, "no 2-D kernel at D 256");
    if constexpr (!kGeneral && kBucket <= 128) two_d = p.dq_turn == nullptr && cfg.two_d_fast_path;
    if (two_d) {  // dq_accum in the tiled layout, one sub-tile of the whole width
      FlashBwdParams tiled = ordered;
      tiled.dq_tile_cols = kBucket;
      status = launch_kernel(&flash_bwd_2d_kernel<T, kTwoDDim>, Bwd2dConfig<kTwoDDim>{}, tiled,
                             static_cast<unsigned>(ctas), stream);
      if (status != cudaSuccess) return status;
      return launch_flash_bwd_convert_dq<kBucket>(tiled, stream);
    }
    status = launch_kernel(&flash_bwd_kernel<T, kBucket, kGeneral>, cfg, ordered,
                           static_cast<unsigned>(ctas), stream);
    if (status != cudaSuccess) return status;
  }
  return launch_flash_bwd_convert_dq<kBucket>(p, stream);
}

}  // namespace tileattn::cuda
