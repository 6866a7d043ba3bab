// The sm80 backward's fast path at D 64 and 128 with two-dimensional warp tiles (the launcher in
// flash_bwd_kernel.cuh picks this kernel where the bucket's BwdTileConfig::two_d_fast_path is
// set). At D 128: one CTA per key block of 128 keys, steps of 64 query rows, 8 warps:
//   S^T = K Q^T and dP^T = V dO^T: each warp 32 keys x 32 queries (4 x 2 warps), so each
//     ldmatrix fragment feeds two mma instead of one (the 1-D kernel's warps own 16 keys and
//     each reloads the whole Q / dO tile);
//   P^T and dS^T go to shared memory ([key][query]);
//   dV += P^T dO and dK += dS^T Q: each warp 32 keys x 64 columns (4 x 2 warps);
//   dQ = dS K: each warp 32 rows x 32 columns (2 x 4 warps), added to the f32 workspace.
// The 1-D kernel issues about 1.24x FlashAttention-2's instructions and moves about 1.36x its
// shared-memory wavefronts; the 2-D tiles bring both down and run about 5% faster. At D 64 the
// mask's bit tests are compiled only into the loops of the steps that need them (each head's
// steps run as masked / whole / masked loops); D 128 masks every step (see the step loops
// below). Fast path only (no mask, softcap, ALiBi, dropout), and not in deterministic mode. dK
// and dV leave through shared memory as whole 16-byte row chunks where they are 16-bit
// (stage_and_store_dk_dv).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/bwd_cta_order.cuh"
#include "cuda/common/bwd_epilogue.cuh"
#include "cuda/common/bwd_visibility.cuh"
#include "cuda/common/dq_layout.cuh"
#include "cuda/common/flash_bwd_params.hpp"
#include "cuda/common/poison.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/tile_coords.cuh"
#include "cuda/sm80/tile_config.hpp"
#include "cuda/sm80/tile_io.cuh"

namespace tileattn::cuda {

// D 128: steps of 64 queries; D 64: of 128 (as the 1-D kernel and FlashAttention-2 there).
template <int kHeadDim>
struct Bwd2dConfig {
  static constexpr int kDim = kHeadDim, kBlockM = kHeadDim == 64 ? 128 : 64, kBlockN = 128;
  static constexpr int kWarps = 8;
  static constexpr int kPitch = kDim;      // K, V, Q, dO rows (elements)
  static constexpr int kPPitch = kBlockM;  // P^T, dS^T rows: one step's queries
  constexpr int threads() const { return kWarps * 32; }
  // K, V; two stages of (Q, dO); P^T and dS^T; two stages of (lse_log2, delta).
  constexpr int smem_bytes() const {
    return (2 * kBlockN * kPitch + 2 * 2 * kBlockM * kPitch + 2 * kBlockN * kPPitch) * 2 +
           2 * 2 * kBlockM * 4;
  }
};
static_assert(Bwd2dConfig<64>{}.smem_bytes() <= 227 * 1024 &&
                  Bwd2dConfig<128>{}.smem_bytes() <= 227 * 1024,
              "shared memory of one CTA");

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(256, 1)
    flash_bwd_2d_kernel(const __grid_constant__ FlashBwdParams p) {
  using Cfg = Bwd2dConfig<kHeadDim>;
  constexpr int kDim = Cfg::kDim, kPitch = Cfg::kPitch, kPPitch = Cfg::kPPitch;
  constexpr int kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN, kThreads = Cfg::kWarps * 32;
  constexpr int kRowBytes = kPitch * 2, kPRowBytes = kPPitch * 2;
  static_assert(bwd_tile_config(kDim).block_n() == kBlockN && bwd_tile_config(kDim).chunks() == 1,
                "the same grid as the 1-D kernel");
  // Warp tiles: S^T / dP^T 32 keys x kQueries queries (kSTiles n8 tiles); dV / dK 32 keys x
  // kKvCols columns (kKvTiles n8 tiles); dQ kDqRows x kDqCols (kDqMTiles m16 x kDqNTiles n8).
  constexpr int kQueries = kBlockM / 2, kSTiles = kQueries / 8;
  constexpr int kKvCols = kDim / 2, kKvTiles = kKvCols / 8;
  constexpr int kDqRows = kBlockM / 2, kDqCols = kDim / 4;
  constexpr int kDqMTiles = kDqRows / 16, kDqNTiles = kDqCols / 8;
  // dS^T in parts at D 64, where its 64 registers per lane beside P^T's would spill.
  constexpr int kDsParts = kHeadDim == 64 ? 2 : 1;
  static_assert(kSTiles % (2 * kDsParts) == 0 && kKvTiles % 2 == 0 && kDqNTiles % 2 == 0,
                "x4 loads");

  extern __shared__ __align__(128) unsigned char smem[];
  T* const k_tile = reinterpret_cast<T*>(smem);
  T* const v_tile = k_tile + kBlockN * kPitch;
  T* const qdo_tiles = v_tile + kBlockN * kPitch;           // 2 stages x [Q, dO] (block_m, pitch)
  T* const pt_tile = qdo_tiles + 2 * 2 * kBlockM * kPitch;  // P^T (block_n, p_pitch)
  T* const ds_tile = pt_tile + kBlockN * kPPitch;           // dS^T (block_n, p_pitch)
  float* const row_stats = reinterpret_cast<float*>(ds_tile + kBlockN * kPPitch);

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  const int mat = lane / 8, mat_row = lane % 8;
  // S^T, dP^T, dV, dK: keys 32 wk.. ; queries (S^T, dP^T) 32 wq.., columns (dV, dK) 64 wq..
  const int wk = warp % 4, wq = warp / 4;
  // dQ: rows 32 wm.., columns 32 wn..
  const int wm = warp / 4, wn = warp % 4;

  const BwdCta cta = bwd_cta_at(static_cast<int>(blockIdx.x), p.num_n_blocks, p.heads_kv * p.batch,
                                p.cta_section_pairs);
  const int n_block = cta.n_block, hk = cta.pair % p.heads_kv, b = cta.pair / p.heads_kv;
  const int n0 = n_block * kBlockN;
  // A varlen sequence's rows (q0, k0 into the packed tensors) and lengths; a key block past a
  // shorter sequence's end holds no keys of it.
  const SequenceRows seq = sequence_rows(p, b);
  if (n0 >= seq.len_k) return;
  const int klen = key_length(p, b, seq.len_k);
  const std::int64_t diagonal = p.bottom_right ? klen - seq.len_q : 0;
  const QueryBlockRange seen =
      query_blocks_seeing<kBlockM, kBlockN>(p, seq.len_q, n0, klen, diagonal);
  const int n_iters = (seen.end - seen.begin) * p.heads_per_kv;

  const std::int64_t esize = p.in_type == ElemType::f32 ? 4 : 2;
  const std::int64_t do_esize = p.dout_type == ElemType::f32 ? 4 : 2;
  struct Step {
    int h, m0;
  };
  const int m0_begin = seen.begin * kBlockM, m0_end = seen.end * kBlockM;
  const auto step_after = [&](Step s) {
    s.m0 += kBlockM;
    if (s.m0 == m0_end) {
      s.m0 = m0_begin;
      ++s.h;
    }
    return s;
  };
  const Step first_step{hk * p.heads_per_kv, m0_begin};
  using QdoCopy = TileCopyLanes<T, kBlockM, kDim, kPitch, kThreads>;
  constexpr int kStatsCopies = 2 * kBlockM / 4;
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

  // The steps' copies where Q and dO are 16-bit with 16-byte rows (the usual case): per-thread
  // source pointers of the next step to load, advanced by one step's rows, or from a head's
  // last query block to the next head's first, instead of recomputed from (b, h, m0) each step
  // (the general load_step spent ~180 instructions per step on that and on its bounds).
  const bool lean_copy = p.vector_loads && p.dout_vector_loads;
  const QdoCopy lanes(threadIdx.x);
  const int span = m0_end - m0_begin;  // query rows a head's visit covers
  const T* q_next = static_cast<const T*>(p.q) + b * p.q_stride_b + first_step.h * p.q_stride_h +
                    static_cast<std::int64_t>(seq.q0 + first_step.m0 + lanes.row0) * p.q_stride_l +
                    lanes.col0;
  const T* do_next =
      static_cast<const T*>(p.dout) + b * p.do_stride_b + first_step.h * p.do_stride_h +
      static_cast<std::int64_t>(seq.q0 + first_step.m0 + lanes.row0) * p.do_stride_l + lanes.col0;
  const std::int64_t q_row_step = kBlockM * p.q_stride_l, do_row_step = kBlockM * p.do_stride_l;
  const std::int64_t q_head_step = p.q_stride_h - (span - kBlockM) * p.q_stride_l;
  const std::int64_t do_head_step = p.do_stride_h - (span - kBlockM) * p.do_stride_l;
  const std::int64_t q_round = QdoCopy::kRowStep * p.q_stride_l;
  const std::int64_t do_round = QdoCopy::kRowStep * p.do_stride_l;
  const bool q_cols_ok = lanes.col0 < p.dim, do_cols_ok = lanes.col0 < p.dim_v;
  // lse_log2 (threads below kBlockM / 4) or delta (the next kBlockM / 4): one 16-byte chunk.
  const unsigned stats_which = threadIdx.x / (kBlockM / 4);
  const float* stats_next =
      (stats_which == 0 ? p.lse_log2 : p.delta) +
      (static_cast<std::int64_t>(b) * p.heads_q + first_step.h) * p.len_q_padded + first_step.m0 +
      threadIdx.x % (kBlockM / 4) * 4;
  const std::int64_t stats_head_step = p.len_q_padded - (span - kBlockM);
  const std::uint32_t qdo_base = smem_address(qdo_tiles);
  const std::uint32_t stats_lane =
      smem_address(row_stats + stats_which * kBlockM + threadIdx.x % (kBlockM / 4) * 4);
  Step next = first_step;  // the step the next copy loads
  const auto load_next = [&](int stage) {
    if (lean_copy) {
      const int rows = min(kBlockM, seq.len_q - next.m0);
      const std::uint32_t q_s = qdo_base + stage * 2 * kBlockM * kRowBytes;
      const std::uint32_t do_s = q_s + kBlockM * kRowBytes;
#pragma unroll
      for (int r = 0; r < QdoCopy::kRounds; ++r) {
        const bool in_rows = lanes.row0 + r * QdoCopy::kRowStep < rows;
        const bool q_ok = q_cols_ok && in_rows, do_ok = do_cols_ok && in_rows;
        cp_async_16(q_s + lanes.round_offset(r),
                    q_ok ? q_next + r * q_round : static_cast<const T*>(p.q), q_ok ? 16 : 0);
        cp_async_16(do_s + lanes.round_offset(r),
                    do_ok ? do_next + r * do_round : static_cast<const T*>(p.dout), do_ok ? 16 : 0);
      }
      if (tid < kStatsCopies) cp_async_16(stats_lane + stage * 2 * kBlockM * 4, stats_next, 16);
    } else {
      load_step(next, stage);
    }
    const bool wrap = next.m0 + kBlockM == m0_end;
    q_next += wrap ? q_head_step : q_row_step;
    do_next += wrap ? do_head_step : do_row_step;
    stats_next += wrap ? stats_head_step : kBlockM;
    next = step_after(next);
  };

  {  // prologue: K and V (kept for the whole loop) and the first step
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
    if (n_iters > 0) load_next(0);
    cp_async_commit();
  }

  // This thread's key rows of S^T / dP^T: 32 wk + 16 mt + g + 8 hh.
  LaneColumnMask<kSTiles> seen_mask[2][2] = {
      {LaneColumnMask<kSTiles>(KeyRowVisibility(p, seq.len_q, n0 + 32 * wk + g, klen, diagonal)),
       LaneColumnMask<kSTiles>(
           KeyRowVisibility(p, seq.len_q, n0 + 32 * wk + g + 8, klen, diagonal))},
      {LaneColumnMask<kSTiles>(
           KeyRowVisibility(p, seq.len_q, n0 + 32 * wk + 16 + g, klen, diagonal)),
       LaneColumnMask<kSTiles>(
           KeyRowVisibility(p, seq.len_q, n0 + 32 * wk + 24 + g, klen, diagonal))}};

  // The non-finite rules (cuda/common/poison.cuh): warp (wk, wq) zeroes the rows 32 wk + 16 wq
  // .. of K and V that hold a non-finite element (the first step's barrier orders the zeros
  // before every warp's reads).
  if (n_iters > 0) {
    cp_async_wait<0>();
    __syncthreads();  // K and V landed (each thread copied chunks of every warp's rows)
    clear_nonfinite_keys<T, kDim>(k_tile, v_tile, 32 * wk + 16 * wq, 16,
                                  [](T* tile, int r, int c) { return tile + r * kPitch + c * 8; });
  }

  // The steps whose queries m0 .. m0 + kBlockM - 1 every key of the block sees: those from
  // whole_from to whole_to (the last key's first query, the first key's last; visibility
  // ranges grow with the key), none if the block passes the key length.
  const int whole_from = KeyRowVisibility(p, seq.len_q, n0 + kBlockN - 1, klen, diagonal).lo;
  const int whole_to = KeyRowVisibility(p, seq.len_q, n0, klen, diagonal).hi;

  // ldmatrix lanes: A from [row][k] tiles (K, V; P^T, dS^T), B from [n][k] (Q, dO for S^T,
  // dP^T), B transposed from [k][n] (dO, Q for dV, dK; K for dQ), A transposed from [k][m]
  // (dS^T for dQ). Every ldmatrix row here is mat_row mod 8, so the swizzle is per lane.
  const int a_row = mat_row + (mat & 1) * 8, a_chunk = mat >> 1;
  const int b_row = mat_row + (mat >> 1) * 8, b_chunk = mat & 1;
  const int bt_row = mat_row + (mat & 1) * 8, bt_chunk = mat >> 1;
  const SwizzleTable<4> sw_a(0, a_chunk, mat_row), sw_b(0, b_chunk, mat_row);
  // dV / dK: this warp's columns; dQ: its columns of K and its rows of dS.
  const SwizzleTable<kKvTiles / 2> sw_bt(kKvCols / 8 * wq, bt_chunk, mat_row);
  const SwizzleTable<kDqNTiles / 2> sw_k(kDqCols / 8 * wn, bt_chunk, mat_row);
  const SwizzleTable<kDqMTiles> sw_ds(kDqRows / 8 * wm, mat & 1, mat_row);
  const std::uint32_t k_base = smem_address(k_tile), v_base = smem_address(v_tile);
  const std::uint32_t pt_base = smem_address(pt_tile), ds_base = smem_address(ds_tile);
  // This lane's bytes of (key row 32 wk + g, query pair 2t) in P^T / dS^T; the chunk of query
  // column 32 wq + 8 nt is XOR-ed with g (the row mod 8).
  const std::uint32_t lane_p_bytes = static_cast<std::uint32_t>((32 * wk + g) * kPRowBytes + 4 * t);

  float acc_dk[2][kKvTiles][4], acc_dv[2][kKvTiles][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < kKvTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_dk[mt][nt][e] = acc_dv[mt][nt][e] = 0.0f;

  // C (key rows, query columns) of two m16 x four n8 tiles from A (kBlockN rows at a_tile) and
  // B (kBlockM rows at b_tile), both [row][d].
  // The n8 tiles n_first .. n_first + kN - 1 of this warp's queries only (kN < kSTiles: a part
  // of C, its A fragments loaded again for each part).
  const auto gemm_keys_by_queries = [&]<int kN>(float(&c)[2][kN][4], std::uint32_t a_tile,
                                                std::uint32_t b_tile, int n_first) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < kN; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) c[mt][nt][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kDim / 16; ++ks) {
      std::uint32_t a[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
        ldmatrix_x4(a[mt], a_tile + (32 * wk + 16 * mt + a_row) * kRowBytes + sw_a.periodic(ks));
#pragma unroll
      for (int np = 0; np < kN / 2; ++np) {
        std::uint32_t bb[4];
        ldmatrix_x4(bb, b_tile + (kQueries * wq + 8 * n_first + 16 * np + b_row) * kRowBytes +
                            sw_b.periodic(ks));
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          mma_16816<T>(c[mt][2 * np], a[mt], bb[0], bb[1]);
          mma_16816<T>(c[mt][2 * np + 1], a[mt], bb[2], bb[3]);
        }
      }
    }
  };
  // Stores C (as gemm_keys_by_queries lays it out) to a [key][query] tile, 16-bit (through the
  // shared pointer, so that ptxas emits STS and may reorder them).
  const auto store_keys_by_queries = [&]<int kN>(T* tile, const float(&c)[2][kN][4], int n_first) {
    unsigned char* const bytes = reinterpret_cast<unsigned char*>(tile) + lane_p_bytes;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh)
#pragma unroll
        for (int nt = 0; nt < kN; ++nt)
          *reinterpret_cast<std::uint32_t*>(bytes + (16 * mt + 8 * hh) * kPRowBytes +
                                            (((kSTiles * wq + n_first + nt) ^ g) << 4)) =
              MmaType<T>::pack(c[mt][nt][2 * hh], c[mt][nt][2 * hh + 1]);
  };
  // acc (32 keys x 64 columns) += A^T B over the step's queries: A from a [key][query] tile,
  // B from a [query][d] tile.
  const auto gemm_keys_by_columns = [&](float(&acc)[2][kKvTiles][4], std::uint32_t a_tile,
                                        std::uint32_t b_tile) {
#pragma unroll
    for (int ks = 0; ks < kBlockM / 16; ++ks) {
      std::uint32_t a[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
        ldmatrix_x4(a[mt], a_tile + (32 * wk + 16 * mt + a_row) * kPRowBytes + sw_a.periodic(ks));
#pragma unroll
      for (int np = 0; np < kKvTiles / 2; ++np) {
        std::uint32_t bb[4];
        ldmatrix_x4_trans(bb, b_tile + (16 * ks + bt_row) * kRowBytes + sw_bt.x[np]);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          mma_16816<T>(acc[mt][2 * np], a[mt], bb[0], bb[1]);
          mma_16816<T>(acc[mt][2 * np + 1], a[mt], bb[2], bb[3]);
        }
      }
    }
  };

  // This lane's first dQ fragment in a step's 64-row blocks of the tiled workspace (see the dQ
  // reduction below): rows kDqRows wm + 16 mt + (g, g + 8), columns kDqCols wn + 8 nt + 2t.
  static_assert(kBlockM % 64 == 0 && (64 % kDqRows == 0 || kDqRows % 64 == 0) &&
                    kDqRows % 64 + 16 * kDqMTiles <= 64,
                "a warp's dQ fragments inside one 64-row block");
  const int dq_lane = dq_fragment_offset(kDqRows * wm, kDqCols * wn, lane, kDim);

  // One step (the queries m0 .. m0 + kBlockM - 1 of head h), with the mask's bit tests
  // (masked) or without them (a whole step: every key of the block sees every query).
  int it = 0;
  Step step = first_step;
  const auto step_body = [&](auto masked) {
    cp_async_wait<0>();
    __syncthreads();  // step it landed; every warp is done with step it - 1's tiles
    if (it + 1 < n_iters) load_next((it + 1) & 1);
    cp_async_commit();

    const int h = step.h, m0 = step.m0;
    const std::uint32_t q_base = smem_address(qdo_tiles + (it & 1) * 2 * kBlockM * kPitch);
    const std::uint32_t do_base = q_base + kBlockM * kRowBytes;
    const float* lse_s = row_stats + (it & 1) * 2 * kBlockM;
    const float* delta_s = lse_s + kBlockM;

    // P^T = 2^(S^T scale log2 e - lse), 0 where the key does not see the query.
    float pt[2][kSTiles][4];
    gemm_keys_by_queries(pt, k_base, q_base, 0);
    {
      unsigned seen_bits[2][2];
      if constexpr (masked) {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh)
            seen_bits[mt][hh] = seen_mask[mt][hh].bits(m0 + kQueries * wq + 2 * t);
      }
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt) {
        const float2 lse2 =
            *reinterpret_cast<const float2*>(lse_s + kQueries * wq + nt * 8 + 2 * t);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float& x = pt[mt][nt][e];
            x = exp2_approx(fmaf(x, p.scale_log2, -((e & 1) ? lse2.y : lse2.x)));
            if constexpr (masked)
              if (!(seen_bits[mt][e / 2] >> (2 * nt + (e & 1)) & 1u)) x = 0.0f;
          }
      }
    }
    store_keys_by_queries(pt_tile, pt, 0);

    // dS^T = P^T o (dP^T - delta), dP^T = V dO^T; in kDsParts parts of this warp's queries.
#pragma unroll
    for (int part = 0; part < kDsParts; ++part) {
      constexpr int kN = kSTiles / kDsParts;
      const int n_first = part * kN;
      float ds[2][kN][4];
      gemm_keys_by_queries(ds, v_base, do_base, n_first);
#pragma unroll
      for (int nt = 0; nt < kN; ++nt) {
        const float2 delta2 =
            *reinterpret_cast<const float2*>(delta_s + kQueries * wq + (n_first + nt) * 8 + 2 * t);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            ds[mt][nt][e] =
                pt[mt][n_first + nt][e] * (ds[mt][nt][e] - ((e & 1) ? delta2.y : delta2.x));
      }
      store_keys_by_queries(ds_tile, ds, n_first);
    }
    __syncthreads();  // P^T and dS^T complete

    gemm_keys_by_columns(acc_dv, pt_base, do_base);  // dV += P^T dO
    gemm_keys_by_columns(acc_dk, ds_base, q_base);   // dK += dS^T Q

    // dQ (this warp's 32 x 32) = dS K, added to the workspace.
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
              a[mt], ds_base + (ks * 16 + (mat >> 1) * 8 + mat_row) * kPRowBytes + sw_ds.x[mt]);
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
      // dq_accum in the tiled layout (cuda/common/dq_layout.cuh, sub-tiles of kDim columns):
      // an m16 x n8 fragment is one float4 there, so each lane adds its four values with one
      // 16-byte reduction, and a warp's 32 lanes cover 512 consecutive bytes. The workspace
      // rows are padded to a multiple of 128 (>= m0 + kBlockM) and its columns to kDim, so no
      // bounds test is needed; the rows past len_q are never read back.
      float* const dq_step =
          p.dq_accum +
          ((static_cast<std::int64_t>(b) * p.heads_q + h) * p.len_q_padded + m0) * kDim + dq_lane;
#pragma unroll
      for (int mt = 0; mt < kDqMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < kDqNTiles; ++nt) {
          float* const dq_frag = dq_step + nt * kDqNextN + mt * kDqNextM;
          const float* c = acc_dq[mt][nt];
#if __CUDA_ARCH__ >= 900
          red_add_v4(dq_frag, c[0], c[1], c[2], c[3]);
#else
#pragma unroll
          for (int e = 0; e < 4; ++e) atomicAdd(dq_frag + e, c[e]);
#endif
        }
    }
    ++it;
    step = step_after(step);
  };

  // At D 64 each head's steps run in three loops, so that the mask's bit tests are compiled
  // only into the loops of the steps that need them: the masked steps before the whole ones
  // (from m0_begin up to the first whole step), the whole steps, and the masked steps after
  // them. A step is whole iff whole_from <= m0 and m0 + kBlockM - 1 <= whole_to: the usual
  // case away from the causal diagonal, a window's edges and the key / query ends. At D 64 this
  // beats a branch inside one loop by one to two percent; at D 128 the three loops make the code
  // larger and run a few percent slower (although the whole steps' loop is 1656 instructions
  // against 1863), so D 128 keeps one loop that masks every step.
  const auto run_steps = [&](auto masked, int count) {
#pragma unroll 1
    for (int c = 0; c < count; ++c) step_body(masked);
  };
  if constexpr (kHeadDim == 128) {  // one loop, every step masked (see above)
    run_steps(std::true_type{}, n_iters);
  } else {
    const int steps_per_head = (m0_end - m0_begin) / kBlockM;
    const auto steps_below = [&](std::int64_t row) {  // steps whose m0 is below row, clamped
      const std::int64_t k = (row - m0_begin + kBlockM - 1) / kBlockM;
      return static_cast<int>(k < 0 ? 0 : (k > steps_per_head ? steps_per_head : k));
    };
    const int whole_begin = steps_below(whole_from);
    const int whole_end =
        max(whole_begin, steps_below(static_cast<std::int64_t>(whole_to) - kBlockM + 2));
#pragma unroll 1
    for (int head = 0; head < p.heads_per_kv && steps_per_head > 0; ++head) {
      run_steps(std::true_type{}, whole_begin);
      run_steps(std::false_type{}, whole_end - whole_begin);
      run_steps(std::true_type{}, steps_per_head - whole_end);
    }
  }
  cp_async_wait<0>();

  // Epilogue (zeros for keys that no query sees).
  if (p.dkv_vector_stores) {
    __syncthreads();                  // every warp is done with the tiles that hold the staging
    if constexpr (kHeadDim == 128) {  // dK in the K tile, dV in the V tile
      stage_and_store_dk_dv<kDim, kBlockN, kThreads, kRowBytes, kBlockN * kRowBytes>(
          p, acc_dk, acc_dv, k_base, KeyRows{b, seq.k0, seq.len_k}, hk, n0, 0, 32 * wk + g,
          kKvTiles * wq, t);
    } else {  // both in the P^T tile's rows (256 bytes): dK the first half, dV the second
      static_assert(kPRowBytes == 4 * kDim, "a P^T row holds a dK and a dV row");
      stage_and_store_dk_dv<kDim, kBlockN, kThreads, kPRowBytes, 2 * kDim>(
          p, acc_dk, acc_dv, pt_base, KeyRows{b, seq.k0, seq.len_k}, hk, n0, 0, 32 * wk + g,
          kKvTiles * wq, t);
    }
    return;
  }
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
    store_dk_dv_rows(p, acc_dk[mt], acc_dv[mt], KeyRows{b, seq.k0, seq.len_k}, hk,
                     n0 + 32 * wk + 16 * mt + g, kKvCols * wq, t);
}

}  // namespace tileattn::cuda
