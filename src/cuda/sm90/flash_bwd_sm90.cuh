// Hopper (sm_90a) backward: wgmma + TMA, warp-specialised. It replaces the sm80 backward's main
// kernel (flash_bwd_kernel) on the fast score path (causal / window / key lengths, no mask,
// softcap, ALiBi or dropout), 16-bit storage, D <= 128; the prepare (delta, lse) and convert
// (dq) kernels are the ones every backward shares (cuda/common/bwd_prepare_convert.cuh).
//
// One CTA = one producer warpgroup + two consumer warpgroups, and owns block_n = 128 keys of one
// (kv head, batch); consumer warpgroup c owns keys 64c..64c+63 of the block. The CTA visits the
// query blocks (block_m rows: 128 at D 64, 64 at D 128) of every query head of its kv head that
// see any of its keys.
//   producer  one warp (lane 0 issues): K and V once, then per step Q and dO (TMA) and the
//             step's lse and delta rows (bulk copies) into a ring of `stages` slots. The copies
//             complete on a per-slot mbarrier, which only the producer warp waits for; it then
//             hands the slot to the consumers through a "step full" named barrier, and takes it
//             back through a "step empty" one. (The consumers read lse and delta with ordinary
//             loads: ordered by mbarriers alone, compute-sanitizer's racecheck, which does not
//             follow mbarriers, reports those reads; named barriers it does follow.)
//   consumers per step, with their 64 keys in the wgmma's M dimension:
//               S^T  = K Q^T, dP^T = V dO^T        (wgmma, both operands in shared memory)
//               P^T  = 2^(S^T scale log2e - lse), dS^T = P^T o (dP^T - delta)   (registers)
//               dV  += P^T dO, dK += dS^T Q        (wgmma, P^T and dS^T from registers)
//               dS^T -> shared memory; both warpgroups sync; then
//               dQ   = dS K (wgmma, dS^T and K read transposed): at block_m 64 each warpgroup
//                      half of the head dim's columns of all 64 rows, at block_m 128 all
//                      columns of its own 64 rows; written to shared memory in fragment
//                      order (cuda/common/dq_layout.cuh).
//             At D 128 dK is issued after dQ and left in flight into the next step (kCarryDk).
//             The consumer warpgroup index comes from a shuffle, so that the descriptors of
//             its K / V rows are warp-uniform values (uniform registers, no spills).
//   dQ warp   (warp 1 of the producer warpgroup) per step adds the two dQ sub-tiles to the f32
//             workspace with one bulk reduction each (cp.reduce.async.bulk .add.f32): the
//             consumers issue no global atomics. (With red.global.add.v4 from the consumers,
//             each reduction waits for the previous one to read its registers: about a fifth
//             of the consumers' stalls.)
// dK (times scale) and dV are written once at the end.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/bwd_cta_order.cuh"
#include "cuda/common/bwd_epilogue.cuh"
#include "cuda/common/bwd_visibility.cuh"
#include "cuda/common/dq_layout.cuh"
#include "cuda/common/elements.cuh"
#include "cuda/common/flash_bwd_params.hpp"
#include "cuda/common/poison.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/tile_coords.cuh"
#include "cuda/sm90/async.cuh"
#include "cuda/sm90/tile_config.hpp"
#include "cuda/sm90/wgmma.cuh"

namespace tileattn::cuda {

// The kernel parameter: the backward's parameters plus TMA descriptors of Q, K, V and dO (the
// forward's 4-D boxes of 64 columns x rows, 128-byte swizzle).
struct Sm90BwdParams {
  FlashBwdParams base;
  CUtensorMap q_map, k_map, v_map, do_map;
};

template <int kStages>
struct Sm90BwdBarriers {
  std::uint64_t kv_full;
  std::uint64_t q_full[kStages];  // the slot's Q, dO, lse and delta landed
};

// Named barrier 1: the two consumer warpgroups, once their dS^T rows are in shared memory.
inline constexpr int kDsReadyBarrier = 1;
// Named barriers 2 + slot ("step full": the producer warp arrives, the consumers sync) and
// 2 + stages + slot ("step empty": the consumers arrive, the producer warp syncs).
inline constexpr int kStepFullBarrier = 2;
inline constexpr int kStepBarrierThreads = 32 + 256;
// Named barriers 2 + 2 stages + c ("dQ full": consumer warpgroup c arrives once its dQ sub-tile
// is in shared memory, the dQ warp syncs) and 4 + 2 stages + c ("dQ empty": the dQ warp arrives
// once the bulk reduction has read it, the warpgroup syncs before writing the next one).
inline constexpr int kDqBarrierThreads = 32 + 128;

// The staged dK / dV epilogue (p.dkv_vector_stores; stage_dk_dv and store_staged_dk_dv_rows of
// cuda/common/bwd_epilogue.cuh): both consumer warpgroups write dK (times scale) and dV,
// converted to 16 bits, into the Q / dO ring (free once both have retired their last GEMMs: a
// 256-thread named barrier); after a barrier of its own warpgroup, each warpgroup stores its 64
// rows with 16-byte global stores, whole rows at a time. (Stored from the accumulator fragments
// directly, the 4-byte stores with a bounds check per element take 15% of the consumers' time
// at L 2048, D 128: ~6 steps per CTA.)
template <int kDim, int kBlockN>
__device__ __forceinline__ void store_dk_dv_staged(const FlashBwdParams& p,
                                                   const float (&acc_dk)[kDim / 8][4],
                                                   const float (&acc_dv)[kDim / 8][4],
                                                   std::uint32_t stage, const KeyRows& keys, int hk,
                                                   int n0, int consumer, int key_row0, int t,
                                                   int all_barrier, int own_barrier) {
  constexpr std::uint32_t kRowBytes = kDim * 2, kTileBytes = kBlockN * kRowBytes;
  using OneTile = const float(&)[1][kDim / 8][4];
  named_barrier_sync(all_barrier, 256);
  stage_dk_dv<kRowBytes, kTileBytes>(p, reinterpret_cast<OneTile>(acc_dk),
                                     reinterpret_cast<OneTile>(acc_dv), stage, key_row0, 0, t);
  named_barrier_sync(own_barrier, 128);
  store_staged_dk_dv_rows<kDim, 64, 128, kRowBytes, kTileBytes, true>(
      p, stage, keys, hk, n0, 0, consumer * 64, static_cast<int>(threadIdx.x) % 128);
}

// kDeterministic: dQ added in key-block order (p.dq_turn), see the dQ warp. A template
// argument rather than a run-time test: with the test in the loop, ptxas does not unroll the
// dQ warp's loop, which slows the default kernel down at D 128.
template <typename T, int kBucket, bool kDeterministic>
__global__ void __launch_bounds__(sm90_bwd_tile_config(kBucket).threads(), 1)
    flash_bwd_sm90_kernel(const __grid_constant__ Sm90BwdParams params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr Sm90BwdTileConfig cfg = sm90_bwd_tile_config(kBucket);
  constexpr int kDim = cfg.head_dim, kBlockM = cfg.block_m, kBlockN = cfg.block_n;
  constexpr int kStages = cfg.stages, kColBlocks = kDim / 64;
  constexpr int kQTiles = kBlockM / 8;  // n8 tiles of S^T / dP^T (query columns)
  constexpr int kDTiles = kDim / 8;     // n8 tiles of dK / dV
  // dQ per consumer warpgroup: 64 rows x kDqCols columns; by rows (block_m 128), the rows
  // 64 c.. of the step's, else all 64 rows and the columns kDqCols c...
  constexpr bool kDqByRows = cfg.dq_split_by_rows();
  constexpr int kDqCols = cfg.dq_cols();
  constexpr bool kCarryDk = kDim > 64;  // dK stays in flight into the next step (see below)
  static_assert((kBlockM == 64 || kBlockM == 128) && kBlockN == 128 && kDim % 64 == 0,
                "tile shapes");
  static_assert(
      cfg.producer_registers * 128 + cfg.consumer_registers * 256 <= setmaxnreg_pool(cfg.threads()),
      "register budget");
  const FlashBwdParams& p = params.base;

  extern __shared__ unsigned char smem_raw[];
  T* const k_tile = reinterpret_cast<T*>((reinterpret_cast<std::uintptr_t>(smem_raw) + 1023) &
                                         ~static_cast<std::uintptr_t>(1023));
  T* const v_tile = k_tile + kBlockN * kDim;   // both (block_n, D) as D/64 column blocks
  T* const q_tiles = v_tile + kBlockN * kDim;  // stages x (block_m, D)
  T* const do_tiles = q_tiles + kStages * kBlockM * kDim;   // stages x (block_m, D)
  T* const ds_tiles = do_tiles + kStages * kBlockM * kDim;  // 2 x dS^T (block_n, block_m)
  float* const row_stats =  // stages x [lse_log2, delta] (block_m each)
      reinterpret_cast<float*>(ds_tiles + 2 * kBlockN * kBlockM);
  float* const dq_stage = row_stats + kStages * 2 * kBlockM;  // 2 x dQ sub-tile (64 x kDqCols)
  auto& bars = *reinterpret_cast<Sm90BwdBarriers<kStages>*>(dq_stage + 2 * 64 * kDqCols);
  constexpr int kStepEmptyBarrier = kStepFullBarrier + kStages;
  constexpr int kDqFullBarrier = kStepEmptyBarrier + kStages, kDqEmptyBarrier = kDqFullBarrier + 2;
  static_assert(kDqEmptyBarrier + 2 <= 16, "named barriers");

  const BwdCta cta = bwd_cta_at(static_cast<int>(blockIdx.x), p.num_n_blocks, p.heads_kv * p.batch,
                                p.cta_section_pairs);
  const int n_block = cta.n_block, hk = cta.pair % p.heads_kv, b = cta.pair / p.heads_kv;
  const int n0 = n_block * kBlockN;
  // A varlen sequence's rows (q0, k0 into the packed tensors) and lengths; a key block past a
  // shorter sequence's end holds no keys of it. The maps' batch coordinate: 0 for a varlen
  // batch, which the maps see as one packed batch entry.
  const SequenceRows seq = sequence_rows(p, b);
  if (n0 >= seq.len_k) return;
  const int map_b = p.cu_seqlens_q != nullptr ? 0 : b;
  const int klen = key_length(p, b, seq.len_k);
  const std::int64_t diagonal = p.bottom_right ? klen - seq.len_q : 0;

  const QueryBlockRange seen =
      query_blocks_seeing<kBlockM, kBlockN>(p, seq.len_q, n0, klen, diagonal);
  const int m_begin = seen.begin, m_end = seen.end;
  const int m_blocks = m_end - m_begin;
  const int n_iters = m_blocks * p.heads_per_kv;
  // Step it: query head hk * heads_per_kv + it / m_blocks, rows from m0.
  auto step_head = [&](int it) { return hk * p.heads_per_kv + it / m_blocks; };
  auto step_m0 = [&](int it) { return (m_begin + it % m_blocks) * kBlockM; };

  if (threadIdx.x == 0) {
    mbarrier_init(&bars.kv_full, 1);
#pragma unroll
    for (int s = 0; s < kStages; ++s) mbarrier_init(&bars.q_full[s], 1);
    fence_barrier_init();
  }
  __syncthreads();

  // Warp-uniform by construction (a shuffle from lane 0), so that everything derived from it (the
  // consumer's K / V rows, hence the wgmma descriptors) can live in uniform registers: computed
  // from threadIdx.x directly, ptxas keeps the loop-invariant descriptors in ordinary registers
  // and spills them (the reloads at the top of each step: ~7% of the stall samples).
  const int warp_group = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
  if (warp_group == 0) {  // ---------------------------------------------------- producer
    setmaxnreg_dec<cfg.producer_registers>();
    if (threadIdx.x >= 64 || n_iters == 0) return;
    if (threadIdx.x >= 32) {  // the dQ warp: lane 0 adds each step's two sub-tiles to dq_accum
      // Step it's rows: query head h, block m (walked like step_head / step_m0).
      int h = hk * p.heads_per_kv, m = m_begin;
      for (int it = 0; it < n_iters; ++it) {
        float* dst =
            p.dq_accum +
            ((static_cast<std::int64_t>(b) * p.heads_q + h) * p.len_q_padded + m * kBlockM) * kDim;
        // kDeterministic: this key block adds to query block m's dQ once the key blocks before
        // it have (turn counters as in the sm80 kernel; a CTA waits only for CTAs of lower
        // index, which started before it).
        int* turn = nullptr;
        if constexpr (kDeterministic) {
          turn = p.dq_turn + (static_cast<std::int64_t>(b) * p.heads_q + h) * p.num_m_blocks + m;
          const int my_turn = n_block - first_key_block_seen<kBlockM, kBlockN>(p, m, diagonal);
          if (threadIdx.x == 32) {
            while (load_acquire(turn) != my_turn) __nanosleep(32);
            fence_proxy_async_global();  // the bulk reductions below come after the acquire
          }
          __syncwarp();
        }
        if (++m == m_end) m = m_begin, ++h;
#pragma unroll
        for (int c = 0; c < 2; ++c) {  // (by rows, sub-tile c is rows 64 c..: the same offset)
          named_barrier_sync(kDqFullBarrier + c, kDqBarrierThreads);
          if (threadIdx.x == 32)
            bulk_reduce_add_f32(dst + c * 64 * kDqCols, dq_stage + c * 64 * kDqCols,
                                64 * kDqCols * 4);
        }
        if (threadIdx.x == 32) {
          bulk_commit_group();
          bulk_wait_all<true>();
        }
        __syncwarp();
        if (it + 1 < n_iters) {
          named_barrier_arrive(kDqEmptyBarrier, kDqBarrierThreads);
          named_barrier_arrive(kDqEmptyBarrier + 1, kDqBarrierThreads);
        }
        if constexpr (kDeterministic) {
          if (threadIdx.x == 32) {  // pass the turn once the adds are done
            bulk_wait_all<false>();
            fence_proxy_async_global();
            __threadfence();
            atomicAdd(turn, 1);
          }
        }
      }
      if (threadIdx.x == 32) bulk_wait_all<false>();
      return;
    }
    const bool leader = threadIdx.x == 0;  // issues the copies; the whole warp does the barriers
    if (leader) {
      prefetch_tensor_map(&params.q_map);
      prefetch_tensor_map(&params.k_map);
      prefetch_tensor_map(&params.v_map);
      prefetch_tensor_map(&params.do_map);
      mbarrier_arrive_expect_tx(&bars.kv_full, 2 * cfg.kv_tile_bytes());
#pragma unroll
      for (int cb = 0; cb < kColBlocks; ++cb) {
        tma_load_4d(k_tile + cb * kBlockN * 64, &params.k_map, &bars.kv_full, cb * 64, seq.k0 + n0,
                    hk, map_b);
        tma_load_4d(v_tile + cb * kBlockN * 64, &params.v_map, &bars.kv_full, cb * 64, seq.k0 + n0,
                    hk, map_b);
      }
    }
    const auto load_step = [&](int it) {
      if (!leader) return;
      const int slot = it % kStages, h = step_head(it), m0 = step_m0(it);
      std::uint64_t* full = &bars.q_full[slot];
      mbarrier_arrive_expect_tx(full, 2 * (cfg.q_tile_bytes() + cfg.row_stats_bytes()));
      T* q_dst = q_tiles + slot * kBlockM * kDim;
      T* do_dst = do_tiles + slot * kBlockM * kDim;
#pragma unroll
      for (int cb = 0; cb < kColBlocks; ++cb) {
        tma_load_4d(q_dst + cb * kBlockM * 64, &params.q_map, full, cb * 64, seq.q0 + m0, h, map_b);
        tma_load_4d(do_dst + cb * kBlockM * 64, &params.do_map, full, cb * 64, seq.q0 + m0, h,
                    map_b);
      }
      const std::int64_t stats_row =
          (static_cast<std::int64_t>(b) * p.heads_q + h) * p.len_q_padded + m0;
      float* stats = row_stats + slot * 2 * kBlockM;
      bulk_load(stats, p.lse_log2 + stats_row, cfg.row_stats_bytes(), full);
      bulk_load(stats + kBlockM, p.delta + stats_row, cfg.row_stats_bytes(), full);
    };
    for (int it = 0; it < min(kStages, n_iters); ++it) load_step(it);
    for (int it = 0; it < n_iters; ++it) {
      // Step it landed: hand its slot to the consumers.
      mbarrier_wait(&bars.q_full[it % kStages], (it / kStages) & 1);
      named_barrier_arrive(kStepFullBarrier + it % kStages, kStepBarrierThreads);
      // Refill the slot of step it - 1 once the consumers are done with it (after handing over
      // step it, so that the consumers never wait for this refill).
      const int done = it - 1;
      if (done >= 0 && done + kStages < n_iters) {
        named_barrier_sync(kStepEmptyBarrier + done % kStages, kStepBarrierThreads);
        load_step(done + kStages);
      }
    }
    return;
  }

  // ----------------------------------------------------------------------------- consumers
  setmaxnreg_inc<cfg.consumer_registers>();
  const int consumer = warp_group - 1;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp_in_group = (static_cast<int>(threadIdx.x) / 32) % 4;
  const int g = lane / 4, t = lane % 4;
  // This thread's key rows (block-local) key_row0 and key_row0 + 8, and which queries see them.
  const int key_row0 = consumer * 64 + warp_in_group * 16 + g;
  const KeyRowVisibility seen_by[2] = {
      KeyRowVisibility(p, seq.len_q, n0 + key_row0, klen, diagonal),
      KeyRowVisibility(p, seq.len_q, n0 + key_row0 + 8, klen, diagonal)};
  const T* const k_rows = k_tile + consumer * 64 * 64;  // this warpgroup's 64 keys, block 0
  const T* const v_rows = v_tile + consumer * 64 * 64;
  // dQ's B operand: K's columns consumer * kDqCols.. (by columns: a column block, or half of
  // one at D 64), or all of them (kDqByRows).
  const T* const k_dq_cols =
      kDqByRows ? k_tile
                : k_tile + (consumer * kDqCols / 64) * kBlockN * 64 + (consumer * kDqCols) % 64;
  // Descriptor low words (sw128_desc_lo) of the loop-invariant tiles: K-major K and V rows for
  // S^T / dP^T, MN-major K columns for dQ.
  const std::uint32_t k_lo = sw128_desc_lo(k_rows, 16), v_lo = sw128_desc_lo(v_rows, 16);
  const std::uint32_t k_dq_lo = sw128_desc_lo(k_dq_cols, kBlockN * 128);
  constexpr std::uint32_t kElt = sizeof(T);
  // This thread's dS^T element (row key_row0, 4-byte column t of query tile 0) in dS^T tile 0,
  // stored as block_m / 64 column blocks of (block_n, 64) and swizzled like the TMA tiles
  // (16-byte chunk c of row r at c ^ (r % 8)): row bases are 128-byte aligned and chunk indices
  // below 8, so query tile nt's chunk is (this address ^ (nt % 8 * 16)) plus its column
  // block's offset.
  static_assert(kQTiles % 8 == 0, "128-byte rows of dS^T per key and column block");
  constexpr std::uint32_t kDsColBlockBytes = kBlockN * 128;
  const std::uint32_t ds_thread =
      smem_address(ds_tiles) + key_row0 * 128 + (key_row0 % 8) * 16 + 4 * t;

  float acc_dk[kDTiles][4], acc_dv[kDTiles][4];
#pragma unroll
  for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_dk[dt][e] = acc_dv[dt][e] = 0.0f;

  if (n_iters > 0) mbarrier_wait(&bars.kv_full, 0);
  // The non-finite rules (cuda/common/poison.cuh): each consumer warp zeroes its 16 rows of K
  // and V that hold a non-finite element, before its warpgroup's first GEMM reads them (the
  // other warpgroup's dQ reads them only after the first step's dS barrier).
  if (n_iters > 0) {
    const std::uint32_t zeroed = clear_nonfinite_keys<T, kDim>(
        k_tile, v_tile, consumer * 64 + warp_in_group * 16, 16,
        [](T* tile, int r, int c) { return tile + (c / 8) * kBlockN * 64 + r * 64 + (c % 8) * 8; });
    if (zeroed != 0) fence_proxy_async_shared();  // the zeros, before the wgmma (async proxy)
    named_barrier_sync(kDqEmptyBarrier + 3 + consumer, 128);  // (the epilogue's, unused yet)
  }
  int m0 = m_begin * kBlockM;  // this step's first query row (step_m0, without the division)
  for (int it = 0; it < n_iters; ++it) {
    const int slot = it % kStages;
    const T* q_s = q_tiles + slot * kBlockM * kDim;
    const T* do_s = do_tiles + slot * kBlockM * kDim;
    // This step's lse * log2(e) and delta rows (from the prepare kernel's workspace).
    const std::uint32_t lse_s = smem_address(row_stats + slot * 2 * kBlockM + 2 * t);
    const std::uint32_t delta_s = lse_s + kBlockM * 4;
    T* ds_s = ds_tiles + (it & 1) * kBlockN * kBlockM;
    // This step's descriptor low words: Q and dO K-major (S^T, dP^T) and MN-major (dK, dV), dS^T.
    const std::uint32_t q_lo = sw128_desc_lo(q_s, 16), do_lo = sw128_desc_lo(do_s, 16);
    const std::uint32_t q_mn_lo = sw128_desc_lo(q_s, kBlockM * 128);
    const std::uint32_t do_mn_lo = sw128_desc_lo(do_s, kBlockM * 128);
    const std::uint32_t ds_lo = sw128_desc_lo(ds_s, kBlockN * 128);
    const std::uint32_t ds_mine = ds_thread + (it & 1) * kBlockN * kBlockM * kElt;
    named_barrier_sync(kStepFullBarrier + slot, kStepBarrierThreads);
    mbarrier_wait(&bars.q_full[slot], (it / kStages) & 1);  // (completed: the wgmma's view)

    // S^T = K Q^T and dP^T = V dO^T (64 keys x 64 queries each).
    float s[kQTiles][4], dp[kQTiles][4];
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kDim / 16; ++ks) {
      const int cb = ks / 4, in_row = (ks % 4) * 16;
      wgmma_ss<T, kBlockM>(s, sw128_desc_at(k_lo, (cb * kBlockN * 64 + in_row) * kElt, 1024),
                           sw128_desc_at(q_lo, (cb * kBlockM * 64 + in_row) * kElt, 1024), ks > 0);
    }
    wgmma_commit();
#pragma unroll
    for (int ks = 0; ks < kDim / 16; ++ks) {
      const int cb = ks / 4, in_row = (ks % 4) * 16;
      wgmma_ss<T, kBlockM>(dp, sw128_desc_at(v_lo, (cb * kBlockN * 64 + in_row) * kElt, 1024),
                           sw128_desc_at(do_lo, (cb * kBlockM * 64 + in_row) * kElt, 1024), ks > 0);
    }
    wgmma_commit();
    // The step's lse rows are loaded while the GEMMs run, and delta's under the dP^T GEMM (the
    // loads are asm volatile and stay where they are written): all of them where registers
    // allow (block_m 64 at D 64, a tile no longer used), else the first kAhead n8 tiles'
    // worth, each later tile's kAhead tiles before its use. Loaded at their use they stall the
    // exponentials and dS behind the LDS latency (at D 128, ~14% of the step loop's stall
    // samples).
    constexpr int kAhead = kDim * kBlockM <= 64 * 64 ? kQTiles : 4;
    float2 lse2[kQTiles], delta2[kQTiles];
#pragma unroll
    for (int nt = 0; nt < kAhead; ++nt) lse2[nt] = load_shared_v2(lse_s + nt * 32);
    wgmma_wait<1>();
    fence_operand(s);
    // kCarryDk: the step before's dK and dV have retired too: nothing of its slot is read any
    // more, and the producer may refill it.
    if (kCarryDk && it > 0 && it - 1 + kStages < n_iters)
      named_barrier_arrive(kStepEmptyBarrier + (it - 1) % kStages, kStepBarrierThreads);

    // P^T = 2^(S^T scale log2e - lse); keys a row does not see, and rows without keys, give 0.
    const int last_row = min(m0 + kBlockM, seq.len_q) - 1;
    // kMaskBranch (D 128): the masking is a warp-uniform branch after the exponentials, which
    // the (usual) interior steps skip; inline, its compares and selects are ~130 of a step's
    // instructions. The branch pays at D 128; at D 64 (block_m 64) it costs a few percent, so
    // the masking stays inline there.
    constexpr bool kMaskBranch = kDim > 64;
    const bool edge_here = !(seen_by[1].lo <= m0 && seen_by[0].hi >= last_row);
    const bool edge = kMaskBranch ? __any_sync(0xffffffffu, edge_here) : edge_here;
#pragma unroll
    for (int nt = 0; nt < kQTiles; ++nt) {
      if (nt + kAhead < kQTiles) lse2[nt + kAhead] = load_shared_v2(lse_s + (nt + kAhead) * 32);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float lse = (e & 1) ? lse2[nt].y : lse2[nt].x;
        s[nt][e] = exp2_approx(fmaf(s[nt][e], p.scale_log2, -lse));
        if (!kMaskBranch && edge && !seen_by[e / 2].sees(m0 + nt * 8 + 2 * t + (e & 1)))
          s[nt][e] = 0.0f;
      }
    }
    if (kMaskBranch && edge) {
#pragma unroll
      for (int nt = 0; nt < kQTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (!seen_by[e / 2].sees(m0 + nt * 8 + 2 * t + (e & 1))) s[nt][e] = 0.0f;
    }
    // P^T packed as the dV GEMM's A operand: here with an early dV, else (block_m 128) tile by
    // tile in the dS loop below, so that S^T, dP^T and the packed P^T are never all live
    // (64 + 64 + 32 registers with the accumulators' 64).
    constexpr bool kPackPLate = kBlockM > 64;
    std::uint32_t pa[kBlockM / 16][4];
    const auto pack_p = [&](int nt) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh)
        pa[nt / 2][(nt % 2) * 2 + hh] = MmaType<T>::pack(s[nt][2 * hh], s[nt][2 * hh + 1]);
    };
    if constexpr (!kPackPLate) {
#pragma unroll
      for (int nt = 0; nt < kQTiles; ++nt) pack_p(nt);
    }
    // dV += P^T dO (B read MN-major: rows of dO are the k index). At D 128 it is issued right
    // away, to run under the dP^T GEMM's tail and the dS computation (a gain of several percent,
    // although ptxas then spills 68 bytes); at D 64 (block_m 64) that order is much slower, and
    // dV goes with dK below.
    constexpr bool kEarlyDv = kDim > 64;
    static_assert(!(kEarlyDv && kPackPLate), "an early dV needs P^T packed first");
    auto issue_dv = [&] {
#pragma unroll
      for (int ks = 0; ks < kBlockM / 16; ++ks)
        wgmma_rs<T, kDim>(acc_dv, pa[ks], sw128_desc_at(do_mn_lo, ks * 16 * 64 * kElt, 1024));
    };
    if constexpr (kEarlyDv) {
      fence_operand(acc_dv);
      wgmma_fence();
      issue_dv();
      wgmma_commit();
    }
#pragma unroll
    for (int nt = 0; nt < kAhead; ++nt) delta2[nt] = load_shared_v2(delta_s + nt * 32);
    wgmma_wait<kEarlyDv ? 1 : 0>();  // dP^T is ready; an early dV may still run
    fence_operand(dp);

    // dS^T = P^T o (dP^T - delta), packed as the dK GEMM's A operand and stored for dQ.
    std::uint32_t da[kBlockM / 16][4];
#pragma unroll
    for (int nt = 0; nt < kQTiles; ++nt) {
      if (nt + kAhead < kQTiles) delta2[nt + kAhead] = load_shared_v2(delta_s + (nt + kAhead) * 32);
      if constexpr (kPackPLate) pack_p(nt);
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] *= dp[nt][e] - ((e & 1) ? delta2[nt].y : delta2[nt].x);
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const std::uint32_t packed = MmaType<T>::pack(s[nt][2 * hh], s[nt][2 * hh + 1]);
        // (The column block's offset is added after the XOR, which it does not touch: at
        // block_m 64, one column block, the stores are those of a single-block layout.)
        std::uint32_t at = (ds_mine + hh * 8 * 128) ^ (nt % 8 * 16);
        if (nt >= 8) at += (nt / 8) * kDsColBlockBytes;
        store_shared_u32(at, packed);
        da[nt / 2][(nt % 2) * 2 + hh] = packed;
      }
    }

    // dQ (64 queries x kDqCols) = dS K once both warpgroups' dS^T rows are in shared memory,
    // and dK += dS^T Q (rows of Q are the k index; at D 64 with dV).
    //   kCarryDk (D 128): dQ first, then dK, and only dQ is waited for in this step: dK runs on
    //     under the dQ hand-over and the next step's first instructions and retires with the
    //     next step's S^T (groups complete in order), which then releases this step's slot.
    //     (Only accumulators read after the loop may stay in flight across the back edge: an
    //     accumulator read inside the loop with a wgmma carried over makes ptxas serialise every
    //     wgmma of the kernel.) This order pays at D 128 and not at D 64 (block_m 64).
    //   otherwise: dK (and dV) before the dS barrier, so that they run while it waits, then dQ,
    //     and the step ends with everything retired.
    const auto issue_dk = [&] {
      if constexpr (!kEarlyDv) issue_dv();
#pragma unroll
      for (int ks = 0; ks < kBlockM / 16; ++ks)
        wgmma_rs<T, kDim>(acc_dk, da[ks], sw128_desc_at(q_mn_lo, ks * 16 * 64 * kElt, 1024));
      wgmma_commit();
    };
    if constexpr (!kCarryDk) {
      fence_operand(acc_dk);
      if constexpr (!kEarlyDv) fence_operand(acc_dv);
      wgmma_fence();
      issue_dk();
    }
    fence_proxy_async_shared();
    named_barrier_sync(kDsReadyBarrier, 256);
    // (kDqByRows: dS over this warpgroup's queries, column block `consumer` of dS^T.)
    const std::uint32_t ds_rows = kDqByRows ? consumer * kDsColBlockBytes : 0;
    float acc_dq[kDqCols / 8][4];
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kBlockN / 16; ++ks)
      wgmma_ss_tt<T, kDqCols>(acc_dq, sw128_desc_at(ds_lo, ds_rows + ks * 16 * 64 * kElt, 1024),
                              sw128_desc_at(k_dq_lo, ks * 16 * 64 * kElt, 1024), ks > 0);
    wgmma_commit();
    if constexpr (kCarryDk) {
      issue_dk();
      wgmma_wait<1>();
    } else {
      wgmma_wait<0>();
      fence_operand(acc_dv);
      fence_operand(acc_dk);
      // Nothing of this slot is read any more: the producer may refill it.
      if (it + kStages < n_iters)
        named_barrier_arrive(kStepEmptyBarrier + slot, kStepBarrierThreads);
    }
    fence_operand(acc_dq);

    // This warpgroup's dQ sub-tile -> shared memory in fragment order (dq_layout.cuh), then the
    // dQ warp adds it to the workspace with one bulk reduction.
    if (it > 0) named_barrier_sync(kDqEmptyBarrier + consumer, kDqBarrierThreads);
    const std::uint32_t dq_mine =
        smem_address(dq_stage + consumer * 64 * kDqCols + (threadIdx.x % 128) * 4);
#pragma unroll
    for (int nt = 0; nt < kDqCols / 8; ++nt)
      store_shared_v4(dq_mine + nt * 128 * 16, acc_dq[nt][0], acc_dq[nt][1], acc_dq[nt][2],
                      acc_dq[nt][3]);
    fence_proxy_async_shared();
    named_barrier_arrive(kDqFullBarrier + consumer, kDqBarrierThreads);
    m0 = m0 + kBlockM == m_end * kBlockM ? m_begin * kBlockM : m0 + kBlockM;
  }
  wgmma_wait<0>();
  fence_operand(acc_dv);
  fence_operand(acc_dk);

  // Epilogue (zeros for keys that no query sees).
  if (p.dkv_vector_stores) {
    constexpr int kEpilogueBarrier = kDqEmptyBarrier + 2;  // then + 1 + consumer
    static_assert(kEpilogueBarrier + 2 < 16, "named barriers");
    static_assert(kStages * kBlockM >= kBlockN, "the Q / dO ring holds dK and dV");
    store_dk_dv_staged<kDim, kBlockN>(p, acc_dk, acc_dv, smem_address(q_tiles),
                                      KeyRows{b, seq.k0, seq.len_k}, hk, n0, consumer, key_row0, t,
                                      kEpilogueBarrier, kEpilogueBarrier + 1 + consumer);
  } else {
    store_dk_dv_rows(p, acc_dk, acc_dv, KeyRows{b, seq.k0, seq.len_k}, hk, n0 + key_row0, 0, t);
  }
#endif
}

}  // namespace tileattn::cuda
