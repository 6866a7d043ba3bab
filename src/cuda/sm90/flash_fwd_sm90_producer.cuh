// The sm90 forward's producer warpgroup. It gives its registers away (setmaxnreg.dec); one
// warp stays. Its lane 0 takes the tiles (flash_fwd_sm90_scheduler.cuh) and issues every TMA
// load: per tile Q (64 rows per consumer warpgroup), then K_j and V_j into two rings of
// `stages` slots, each slot guarded by a "full" mbarrier (transaction bytes) and an "empty" one
// (one arrival per consumer warp). V lags K by one block, the order the consumers need. The
// whole warp hands each tile over (warp-aligned named-barrier operations, which racecheck
// follows).
#pragma once

#include <cstdint>

#include "cuda/sm90/async.cuh"
#include "cuda/sm90/flash_fwd_sm90_scheduler.cuh"
#include "cuda/sm90/flash_fwd_sm90_smem.cuh"
#include "cuda/sm90/flash_fwd_sm90_traits.cuh"

namespace tileattn::cuda {

// Key block n_block_begin + i of the tile into the K ring (kV false) or the V ring (kV true):
// slot it % stages, it = kv_it + i, once the consumers have freed the slot's previous use.
// tiles: the ring's first slot.
template <class K, bool kV>
__device__ __forceinline__ void load_kv_block(const Sm90FwdParams& params,
                                              Sm90Barriers<K::kStages>& bars,
                                              typename K::Element* tiles, int kv_it, int i,
                                              const Sm90TileWork& w, int hk, int b,
                                              std::uint64_t hint) {
  // (A varlen sequence's keys start at row k0 of the packed tensors; b is then 0.)
  constexpr int kStages = K::kStages, kBlockN = K::kBlockN;
  const int it = kv_it + i, slot = it % kStages;
  mbarrier_wait(kV ? &bars.v_empty[slot] : &bars.k_empty[slot], ((it / kStages) & 1) ^ 1);
  mbarrier_arrive_expect_tx(kV ? &bars.v_full[slot] : &bars.k_full[slot], K::cfg.kv_tile_bytes());
  typename K::Element* dst = tiles + slot * kBlockN * K::kDim;
#pragma unroll
  for (int cb = 0; cb < K::kColBlocks; ++cb)
    tma_load_4d(dst + cb * kBlockN * 64, kV ? &params.v_map : &params.k_map,
                kV ? &bars.v_full[slot] : &bars.k_full[slot], cb * 64,
                w.coords.k0 + (w.n_block_begin + i) * kBlockN, hk, b, hint);
}

// q_tiles: the shared memory's aligned base (Sm90FwdSmem); the rest of the buffers and the
// barriers are derived from it here.
template <class K>
__device__ __forceinline__ void run_sm90_fwd_producer(const Sm90FwdParams& params,
                                                      typename K::Element* const q_tiles) {
  using T = typename K::Element;
  constexpr int kQStages = K::kQStages, kBlockM = K::kBlockM, kDim = K::kDim;
  setmaxnreg_dec<K::cfg.producer_registers>();
  if (threadIdx.x >= 32) return;
  T* const k_tiles = q_tiles + Sm90FwdSmem<K>::kQElements;
  T* const v_tiles = k_tiles + Sm90FwdSmem<K>::kKvElements;
  auto& bars = *reinterpret_cast<Sm90Barriers<K::kStages>*>(reinterpret_cast<char*>(q_tiles) +
                                                            Sm90FwdSmem<K>::kBarsOffset);
  const bool leader = threadIdx.x == 0;
  if (leader) {
    prefetch_tensor_map(&params.q_map);
    prefetch_tensor_map(&params.k_map);
    prefetch_tensor_map(&params.v_map);
    if (params.o_tma) prefetch_tensor_map(&params.o_map);  // the consumers' TMA stores
  }
  // Q is read by one CTA once; K and V by every query block of their heads.
  const std::uint64_t read_once = l2_evict_first();
  const std::uint64_t read_often = params.kv_evict_last ? l2_evict_last() : l2_evict_normal();
  // Per tile, with one Q buffer: K_0 first (its ring slot is usually free already), then the
  // tile index and Q once the consumers are done with the previous Q, then the rest of K and
  // V. With two Q buffers the buffer is free already (the consumers released it a tile ago):
  // the tile index and Q go first, so Q arrives while the consumers finish the previous tile.
  // Ring positions count key blocks over all tiles of this CTA: block number `it` uses slot
  // it % stages in pass it / stages; the Q slot's pass is the number of tiles with work so far.
  int kv_it = 0, q_pass = 0;
  for (int tile = static_cast<int>(blockIdx.x);; ++q_pass) {
    const bool valid = tile < params.num_tiles;
    const Sm90TileWork w = tile_work<kBlockM, K::kBlockN>(params, valid ? tile : 0);
    const int n_blocks = valid ? w.n_blocks : 0;
    // The maps' batch coordinate: a varlen batch is one packed batch entry.
    const int hk = w.coords.hk, b = params.base.cu_seqlens_q != nullptr ? 0 : w.coords.b;
    const int q_slot = q_pass % kQStages;
    if (leader) {
      if (kQStages == 1 && n_blocks > 0)
        load_kv_block<K, false>(params, bars, k_tiles, kv_it, 0, w, hk, b, read_often);
      mbarrier_wait(&bars.q_empty[q_slot][0], ((q_pass / kQStages) & 1) ^ 1);
    }
    __syncwarp();
    // The tile's index and work to the consumers (Sm90TileHandOver).
    if (q_pass > 0) named_barrier_sync(K::kTileEmptyBarrier, K::kTileEmptyThreads);
    if (leader) {
      bars.hand_over.tile[q_pass & 1] = valid ? tile : -1;
      if (valid) bars.hand_over.work[q_pass & 1] = w;
    }
    __syncwarp();
#pragma unroll
    for (int c = 0; c < K::kConsumerGroups; ++c)
      named_barrier_arrive(K::kTileFullBarrier + c, K::kTileFullThreads);
    if (leader) {
      // Each warpgroup's 64 rows as soon as that warpgroup has freed its part of the buffer
      // (warpgroup 0's was waited for above, before the tile index went out).
#pragma unroll
      for (int c = 0; c < K::kConsumerGroups; ++c) {
        if (c > 0 && valid) mbarrier_wait(&bars.q_empty[q_slot][c], ((q_pass / kQStages) & 1) ^ 1);
        if (n_blocks > 0) {
          mbarrier_arrive_expect_tx(&bars.q_full[q_slot][c], K::kQBytesPerGroup);
          T* const q_dst = q_tiles + q_slot * kBlockM * kDim + c * 64 * 64;
#pragma unroll
          for (int cb = 0; cb < K::kColBlocks; ++cb)
            tma_load_4d(q_dst + cb * kBlockM * 64, &params.q_map, &bars.q_full[q_slot][c], cb * 64,
                        w.coords.q0 + w.coords.m0 + c * 64, w.coords.h, b, read_once);
        } else if (valid) {
          mbarrier_arrive(&bars.q_full[q_slot][c]);  // a tile without key blocks: no Q to load
        }
      }
    }
    if (!valid) break;
    if (leader) {
      // Tiles of equal work (early_claim): the next tile's index is taken now and used
      // after this tile's loads, so the atomic's round trip overlaps them instead of
      // delaying the next tile's Q (with one Q buffer the consumers would wait ~2000 clocks
      // for it at D 128, L 1k). Causal tiles are taken late: claiming one tile ahead
      // unbalances the longest-first schedule's tail (a few percent at D 256).
      const int next = params.early_claim ? next_tile(params) : 0;
      // With one Q buffer the next tile's Q can load only once this tile's last S is done;
      // asked of L2 now, that load then waits for L2 rather than for HBM. This pays at D 128
      // and not at D 256 (its Q tile is 64 KB, perhaps competing with the first K / V), so
      // only D 128 prefetches.
      if (kQStages == 1 && kDim == 128 && params.early_claim && next < params.num_tiles &&
          params.base.cu_seqlens_q == nullptr) {
        int m_block, bh;
        tile_at(params, next, m_block, bh);
#pragma unroll
        for (int r = 0; r < kBlockM; r += 64)
#pragma unroll
          for (int cb = 0; cb < K::kColBlocks; ++cb)
            tma_prefetch_4d(&params.q_map, cb * 64, m_block * kBlockM + r, bh % params.base.heads_q,
                            bh / params.base.heads_q);
      }
      if (kQStages > 1 && n_blocks > 0)
        load_kv_block<K, false>(params, bars, k_tiles, kv_it, 0, w, hk, b, read_often);
      for (int i = 0; i < n_blocks; ++i) {
        if (i + 1 < n_blocks)
          load_kv_block<K, false>(params, bars, k_tiles, kv_it, i + 1, w, hk, b, read_often);
        load_kv_block<K, true>(params, bars, v_tiles, kv_it, i, w, hk, b, read_often);
      }
      tile = params.early_claim ? next : next_tile(params);
    }
    kv_it += n_blocks;
    tile = __shfl_sync(0xffffffffu, tile, 0);
  }
  if (leader) finish_schedule(params);
}

}  // namespace tileattn::cuda
