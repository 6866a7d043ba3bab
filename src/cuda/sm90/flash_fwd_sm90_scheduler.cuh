// The sm90 forward's tile scheduler: the persistent grid's tile order and its per-launch tile
// counter, a tile's work (coordinates and key blocks), and the hand-over of each tile from the
// producer warp, which takes the tiles, to the consumer warpgroups.
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/tile_coords.cuh"
#include "cuda/sm90/async.cuh"
#include "cuda/sm90/flash_fwd_sm90_traits.cuh"

namespace tileattn::cuda {

// Tile order: by group of group_heads (batch, head) pairs, then query block last-first (the
// longest causal blocks first), then pair: the CTAs running at one time share a few heads' K/V
// in L2.
__device__ __forceinline__ void tile_at(const Sm90FwdParams& params, int tile, int& m_block,
                                        int& bh) {
  const FlashFwdParams& p = params.base;
  const int group_size = params.group_heads * p.num_m_blocks;
  const int group = tile / group_size, within = tile % group_size;
  const int pairs = p.batch * p.heads_q;
  const int heads_in_group = min(params.group_heads, pairs - group * params.group_heads);
  m_block = p.num_m_blocks - 1 - within / heads_in_group;
  bh = group * params.group_heads + within % heads_in_group;
}

// Dynamic persistent schedule: CTA c starts with tile c; whenever its producer needs another
// tile it takes the next one from a global counter, so CTAs that drew short (causal) tiles take
// more of them. Counters live in static device memory (no allocation per call): a launch uses
// slot sched_slot, and the last CTA to finish resets it for the launch that reuses the slot
// kSchedulerSlots launches later (launches on one stream run in order; the slot count bounds how
// many launches may be in flight at once across streams).
inline constexpr unsigned kSchedulerSlots = 1024;
struct TileCounter {
  unsigned next, finished;
};
static __device__ TileCounter g_tile_counters[kSchedulerSlots];

__device__ __forceinline__ int next_tile(const Sm90FwdParams& params) {
  return static_cast<int>(gridDim.x + atomicAdd(&g_tile_counters[params.sched_slot].next, 1u));
}

__device__ __forceinline__ void finish_schedule(const Sm90FwdParams& params) {
  TileCounter& counter = g_tile_counters[params.sched_slot];
  __threadfence();  // this CTA's last take from `next` is ordered before its `finished` count
  if (atomicAdd(&counter.finished, 1u) == gridDim.x - 1) {
    counter.next = 0;
    counter.finished = 0;
  }
}

// A tile's coordinates, the visible key ranges of its first and last rows, and the key blocks
// [n_block_begin, n_block_begin + n_blocks) it visits.
struct Sm90TileWork {
  TileCoords coords;
  int first_top, last_top, first_bottom, last_bottom, n_block_begin, n_blocks;
};

template <int kBlockM, int kBlockN>
__device__ __forceinline__ Sm90TileWork tile_work(const Sm90FwdParams& params, int tile) {
  Sm90TileWork w;
  int m_block, bh;
  tile_at(params, tile, m_block, bh);
  w.coords = tile_coords_at<kBlockM>(params.base, m_block, bh);
  w.coords.visible(w.coords.m0, w.first_top, w.last_top);
  w.coords.visible(w.coords.m0 + w.coords.rows_in_block - 1, w.first_bottom, w.last_bottom);
  w.n_block_begin = w.first_top / kBlockN;
  // (A block past the end of a varlen sequence, rows_in_block <= 0, visits none.)
  const int end = w.first_top < w.last_bottom && w.coords.rows_in_block > 0
                      ? (w.last_bottom + kBlockN - 1) / kBlockN
                      : 0;
  w.n_blocks = end > w.n_block_begin ? end - w.n_block_begin : 0;
  return w;
}

// The consumers' next tile, in shared memory: the index (-1: no more tiles) and the tile's work,
// in two slots used in turn (by the parity of the hand-over count, q_pass), so that a slot is
// rewritten only two hand-overs after it was read. The producer computes the work beside the
// index (it needs it for its loads), so that the consumers do not compute it between their Q and
// their first key block (its integer divisions' reciprocals wait there behind the other
// warpgroup's exponentials in the MUFU queue).
// Protocol (named barriers, Sm90FwdTraits): the producer warp waits on kTileEmptyBarrier until
// every consumer warpgroup has read the previous tile (from the second hand-over on), lane 0
// writes the slot, and the warp arrives on each warpgroup's kTileFullBarrier + w; a warpgroup
// syncs there, reads the slot and arrives on kTileEmptyBarrier. (The producer and the consumer
// tile loops do this inline.)
struct Sm90TileHandOver {
  int tile[2];
  Sm90TileWork work[2];
};

}  // namespace tileattn::cuda
