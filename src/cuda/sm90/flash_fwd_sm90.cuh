// Hopper (sm_90a) forward: wgmma + TMA, warp-specialised (FlashAttention-3's structure).
//
// One CTA = one producer warpgroup + consumer_warp_groups consumer warpgroups (64 query rows
// each); block_m = 64 x consumers query rows of one (batch, head). The grid is persistent: CTAs
// take tiles from a per-launch counter until none are left (tile_at / next_tile).
//   producer  gives its registers away (setmaxnreg.dec); one thread issues every TMA load: per
//             tile the tile index (through named barriers) and Q, then K_j and V_j into two
//             rings of `stages` slots, each
//             slot guarded by a "full" mbarrier (transaction bytes) and an "empty" one (one
//             arrival per consumer warp). V lags K by one block, the order the consumers need.
//   consumers take the registers (setmaxnreg.inc) and run, per key block j,
//               S_j = Q K_j^T            wgmma m64n{block_n}k16, Q and K from shared memory
//               O  += P_{j-1} V_{j-1}    wgmma m64n{D}k16, P from registers, V MN-major
//             issued back to back (O rescaled between the two issues), then wait for S_j only
//             (wait_group 1) and run the online softmax of block j while P_{j-1} V_{j-1} is
//             still on the tensor cores (FlashAttention-3's intra-warpgroup overlap). The
//             warpgroups take turns to issue (ping-pong), so one's softmax overlaps another's
//             GEMMs. The fast kernels' softmax speculates: the exponentials against the
//             running maximum without the block's own, kept when none exceeds 2^8 (see softmax).
// Score policies: the fast path (causal / window / key lengths, the softmax max taken on raw
// scores, scale > 0) or kGeneral (mask, softcap, ALiBi through general_score_log2, and dropout,
// shared with the sm80 kernel). Blocks outside the causal / window band are never loaded; blocks
// fully inside it are not masked element by element.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#ifdef TILEATTN_FWD_TRACE
#include <cstdio>
#endif

#include "cuda/common/elements.cuh"
#include "cuda/common/exp2_poly.cuh"
#include "cuda/common/flash_fwd_params.hpp"
#include "cuda/common/launch.cuh"
#include "cuda/common/poison.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/score_mods.cuh"
#include "cuda/common/tile_coords.cuh"
#include "cuda/sm90/async.cuh"
#include "cuda/sm90/tile_config.hpp"
#include "cuda/sm90/wgmma.cuh"

namespace tileattn::cuda {

// The kernel parameter: the common parameters plus TMA descriptors of Q, K and V, each a 4-D
// tensor (head dim, length, heads, batch) read in boxes of (64 columns, rows) with the 128-byte
// swizzle: a tile is stored as head_dim / 64 column blocks of (rows, 64), the wgmma canonical
// K-major layout.
struct Sm90FwdParams {
  FlashFwdParams base;
  CUtensorMap q_map, k_map, v_map;
  CUtensorMap o_map;     // the output in boxes of (64 columns, 64 rows), if o_tma
  bool o_tma;            // the staged output leaves shared memory by TMA stores
  int num_tiles;         // query blocks x heads x batch
  int group_heads;       // (batch, head) pairs per scheduling group (their K/V fit in L2 together)
  unsigned sched_slot;   // this launch's tile counter (kSchedulerSlots of them, reused in turn)
  bool ping_pong;        // consumer warpgroups take turns to issue their GEMMs
  // Which of a tile's GEMM issues take a turn besides the key-block steps: the first block's S
  // and the last block's P V (see take_turn).
  bool first_turn, finish_turn;
  bool kv_evict_last;    // K/V loads carry the L2 evict-last hint (else evict-normal)
  float rescale_threshold;  // lazy rescaling of the online softmax, log2 units (0: eager)
  bool early_claim;  // tiles of equal work: the producer takes its next tile as a tile starts
};

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

inline constexpr int kSm90ConsumerWarps = 8;  // two consumer warpgroups

// A tile's coordinates, the visible key ranges of its first and last rows, and the key blocks
// [n_block_begin, n_block_begin + n_blocks) it visits.
struct Sm90TileWork {
  TileCoords coords;
  int first_top, last_top, first_bottom, last_bottom, n_block_begin, n_blocks;
};

template <int kStages>
struct Sm90Barriers {
  // Per Q buffer (cfg.q_stages of them used) and consumer warpgroup: each warpgroup's 64 rows
  // load and free on their own, so that the first warpgroup's next rows need not wait for the
  // second warpgroup to finish the tile.
  std::uint64_t q_full[2][kSm90ConsumerWarps / 4], q_empty[2][kSm90ConsumerWarps / 4];

  std::uint64_t k_full[kStages], k_empty[kStages];
  std::uint64_t v_full[kStages], v_empty[kStages];
  // The consumers' next tile (-1: no more tiles), in two words used in turn (by the parity of
  // the hand-over count), so that a word is rewritten only two hand-overs after it was read.
  int tile[2];
  // The tile's work, computed by the producer beside its index, so that the consumers do not
  // compute it between their Q and their first key block (its integer divisions' reciprocals
  // wait there behind the other warpgroup's exponentials in the MUFU queue).
  Sm90TileWork work[2];
  // Per consumer warp: batch, head and first query row of its current tile, written by its lane
  // 0 when the tile starts and read by the epilogue (see Epilogue below).
  int out_coords[kSm90ConsumerWarps][3];
};

// Named barriers: consumer warpgroup w (of n) waits for its turn on kTurnBarrier + w, syncs its
// output staging on kTurnBarrier + n + w and takes its next tile index on kTurnBarrier + 2n + w;
// the producer warp waits on kTurnBarrier + 3n until every warpgroup has read the previous index.
// The tile index goes through named barriers rather than the Q mbarriers because
// compute-sanitizer's racecheck models bar.sync / bar.arrive but not mbarrier parity waits.
inline constexpr int kTurnBarrier = 1;

// v[0] = max of v[0..N), by pairs at strides 1, 2, 4, ... (log2 N dependent steps).
template <int N, int kStride = 1>
__device__ __forceinline__ void max_tree(float (&v)[N]) {
  if constexpr (kStride < N) {
#pragma unroll
    for (int i = 0; i + kStride < N; i += 2 * kStride) v[i] = fmaxf(v[i], v[i + kStride]);
    max_tree<N, 2 * kStride>(v);
  }
}

#ifdef TILEATTN_FWD_TRACE
// Measurement build only (-DTILEATTN_FWD_TRACE): lane 0 of each consumer warpgroup's first warp
// in CTA 0 stores clock64() to global memory in the launches numbered kTraceLaunch modulo
// kTracePeriod (scripts/gpu/trace_fwd.sh runs 2 warm-up and 3 timed launches per shape, so
// each shape's second timed launch is traced, causal and not): at eight points of every key
// block (block 0 too) of one tile (the first from kTraceBlockTile on with at least
// kTraceMinBlocks key blocks: a warm tile boundary), and at nine points of each of its first
// kTraceTiles tiles (loop top, tile index read, Q ready, last P V done,
// epilogue done; inside the staged epilogue: 1 / l done, buffer free, buffer written, TMA
// stores issued).
// print_fwd_trace_kernel (launched after each forward) prints them
// (scripts/gpu/trace_summary.py reads them). No printf in the kernel itself: a call inside it
// makes ptxas serialise the wgmmas.
inline constexpr int kTraceIters = 24, kTracePoints = 8, kTraceLaunch = 3, kTracePeriod = 5;
inline constexpr int kTraceTiles = 16, kTileTracePoints = 9, kTraceBlockTile = 4;
inline constexpr int kTraceMinBlocks = 4;  // the block-traced tile's least key blocks
static __device__ unsigned g_trace_launches[4];  // per consumer warpgroup
static __device__ long long g_trace[4][kTraceIters][kTracePoints];
static __device__ int g_trace_blocks[4];
static __device__ long long g_trace_tiles[4][kTraceTiles][kTileTracePoints];
static __device__ int g_trace_tile_blocks[4][kTraceTiles];
static __device__ int g_trace_tile_count[4];
static __device__ unsigned g_trace_launch;  // the traced launch's number
static __global__ void print_fwd_trace_kernel() {
  if (g_trace_blocks[0] > 0 || g_trace_tile_count[0] > 0)
    printf("trace launch %u\n", g_trace_launch);
  for (int c = 0; c < 4; ++c) {
    for (int i = 0; i < g_trace_blocks[c] && i < kTraceIters; ++i) {
      const long long* t = g_trace[c][i];
      printf("trace wg %d block %d: %lld %lld %lld %lld %lld %lld %lld %lld\n", c, i, t[0], t[1],
             t[2], t[3], t[4], t[5], t[6], t[7]);
    }
    for (int i = 0; i < g_trace_tile_count[c] && i < kTraceTiles; ++i) {
      const long long* t = g_trace_tiles[c][i];
      printf("trace wg %d tile %d blocks %d: %lld %lld %lld %lld %lld %lld %lld %lld %lld\n", c,
             i, g_trace_tile_blocks[c][i], t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8]);
    }
    g_trace_blocks[c] = 0;
    g_trace_tile_count[c] = 0;
  }
}
#define TILEATTN_TRACE(i, k) \
  do { if (tracing && (i) < kTraceIters) g_trace[consumer][i][k] = clock64(); } while (0)
#define TILEATTN_TRACE_TILE(i, k)                                                       \
  do {                                                                                  \
    if (tracing_tiles && (i) < kTraceTiles) g_trace_tiles[consumer][i][k] = clock64(); \
  } while (0)
#else
#define TILEATTN_TRACE(i, k) do { } while (0)
#define TILEATTN_TRACE_TILE(i, k) do { } while (0)
#endif

template <typename T, int kBucket, bool kGeneral>
__global__ void __launch_bounds__(sm90_tile_config(kBucket).threads(), 1)
    flash_fwd_sm90_kernel(const __grid_constant__ Sm90FwdParams params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr Sm90TileConfig cfg = sm90_tile_config(kBucket);
  constexpr int kDim = cfg.head_dim, kBlockM = cfg.block_m, kBlockN = cfg.block_n;
  constexpr int kStages = cfg.stages, kConsumerWarps = cfg.consumer_warp_groups * 4;
  constexpr int kQStages = cfg.q_stages;
  static_assert(kQStages == 1 || kQStages == 2);
  constexpr int kNTiles = kBlockN / 8, kDTiles = kDim / 8, kColBlocks = kDim / 64;
  constexpr int kHalfTiles = kNTiles / 2;  // n8 tiles in half a key block (see softmax)
  constexpr bool kHalfMasked = cfg.half_masked_blocks && !kGeneral;
  // Every kPolyEvery-th n8 tile's exponentials by polynomial instead of the MUFU (exp2_poly).
  constexpr int kPolyEvery = cfg.exp_poly_every > 0 ? cfg.exp_poly_every : kNTiles + 1;
  static_assert(kBlockM == 64 * cfg.consumer_warp_groups && kDim % 64 == 0 && kBlockN % 16 == 0);
  static_assert(kConsumerWarps == kSm90ConsumerWarps);
  // The kernels where ptxas spills re-read the epilogue's coordinates (see the epilogue), and
  // so do the speculating ones (their scores and a second P buffer: 32 more registers).
  constexpr bool kSpeculate = cfg.speculate_max && !kGeneral;
  constexpr bool kRereadCoords = kDim > 128 || kGeneral || kSpeculate;
  // Speculating kernels at block_n 64 (D 256): a tile's last key block may hold no key that a
  // warpgroup's rows see (the causal diagonal's second block, for warpgroup 0). That
  // warpgroup's loop then ends a block early; it takes the block's turns and releases its K / V
  // slots without GEMMs. (Trimming half a block at block_n 128 by a branch around a wgmma, or
  // a predicated one, made ptxas serialise the wgmmas: C7520.)
  constexpr bool kSkipLast = kSpeculate && kBlockN == 64;
  constexpr int kConsumerGroups = cfg.consumer_warp_groups;
  constexpr int kQBytesPerGroup = cfg.q_tile_bytes() / kConsumerGroups;  // 64 rows
  static_assert(kBlockM == 64 * kConsumerGroups, "a consumer warpgroup owns 64 query rows");
  constexpr int kStageBarrier = kTurnBarrier + kConsumerGroups;  // + consumer: output staging
  constexpr int kTileFullBarrier = kTurnBarrier + 2 * kConsumerGroups;  // + consumer
  constexpr int kTileEmptyBarrier = kTileFullBarrier + kConsumerGroups;
  constexpr int kTileFullThreads = 32 + 128, kTileEmptyThreads = 32 + 128 * kConsumerGroups;
  static_assert(kTileEmptyBarrier <= 15, "named barriers");
  static_assert(cfg.producer_registers * 128 +
                        cfg.consumer_registers * 128 * cfg.consumer_warp_groups <=
                    setmaxnreg_pool(cfg.threads()),
                "register budget");
  const FlashFwdParams& p = params.base;

  extern __shared__ unsigned char smem_raw[];
  // The 1024-byte-aligned base as an offset from smem_raw, so that the compiler keeps knowing
  // it is shared memory (shared loads and stores instead of generic ones).
  T* const q_tiles = reinterpret_cast<T*>(
      smem_raw + ((1024u - (smem_address(smem_raw) & 1023u)) & 1023u));  // q_stages x (block_m, D)
  T* const k_tiles = q_tiles + kQStages * kBlockM * kDim;  // stages x (block_n, D)
  T* const v_tiles = k_tiles + kStages * kBlockN * kDim;  // stages x (block_n, D)
  T* const o_stage = v_tiles + kStages * kBlockN * kDim;  // (block_m, o_stage_cols)
  constexpr int kBarsOffset =  // bytes from the aligned base to the barrier block
      static_cast<int>((kQStages * kBlockM * kDim + 2 * kStages * kBlockN * kDim) * sizeof(T)) +
      cfg.o_stage_bytes();
  static_assert(sizeof(Sm90Barriers<kStages>) <= 1024, "the barrier block's kilobyte");
  auto& bars = *reinterpret_cast<Sm90Barriers<kStages>*>(reinterpret_cast<char*>(q_tiles) +
                                                         kBarsOffset);

  using TileWork = Sm90TileWork;
  auto tile_work = [&](int tile) {
    TileWork w;
    int m_block, bh;
    tile_at(params, tile, m_block, bh);
    w.coords = tile_coords_at<kBlockM>(p, m_block, bh);
    w.coords.visible(w.coords.m0, w.first_top, w.last_top);
    w.coords.visible(w.coords.m0 + w.coords.rows_in_block - 1, w.first_bottom, w.last_bottom);
    w.n_block_begin = w.first_top / kBlockN;
    const int end =
        w.first_top < w.last_bottom ? (w.last_bottom + kBlockN - 1) / kBlockN : 0;
    w.n_blocks = end > w.n_block_begin ? end - w.n_block_begin : 0;
    return w;
  };

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < kQStages; ++s)
#pragma unroll
      for (int c = 0; c < kConsumerGroups; ++c) {
        mbarrier_init(&bars.q_full[s][c], 1);
        mbarrier_init(&bars.q_empty[s][c], 4);  // the warpgroup's warps
      }
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(&bars.k_full[s], 1);
      mbarrier_init(&bars.v_full[s], 1);
      mbarrier_init(&bars.k_empty[s], kConsumerWarps);
      mbarrier_init(&bars.v_empty[s], kConsumerWarps);
    }
    fence_barrier_init();
  }
  __syncthreads();

  // Ring positions count key blocks over all tiles of this CTA: block number `it` uses slot
  // it % stages in pass it / stages; the Q slot's pass is the number of tiles with work so far.
  // In the fast kernels the warpgroup index is made warp-uniform (a lane-0 shuffle), so that
  // the consumer's Q descriptors live in uniform registers: a clear gain at D 256, and at D 64
  // it takes the step's eight R2UR moves of the Q descriptors out of the loop (1160 -> 1146
  // instructions). (In the general kernel at D 128 it raises ptxas's spills from 252 to 360
  // bytes, so the general kernels keep the plain index.)
  constexpr bool kUniformWarpGroup = !kGeneral;
  const int warp_group = kUniformWarpGroup
                             ? __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0)
                             : static_cast<int>(threadIdx.x) / 128;
  if (warp_group == 0) {  // ---------------------------------------------------- producer
    setmaxnreg_dec<cfg.producer_registers>();
    // One producer warp: lane 0 takes the tiles and issues every TMA load; the whole warp hands
    // each tile index over (warp-aligned named-barrier operations, which racecheck follows).
    if (threadIdx.x >= 32) return;
    const bool leader = threadIdx.x == 0;
    if (leader) {
      prefetch_tensor_map(&params.q_map);
      prefetch_tensor_map(&params.k_map);
      prefetch_tensor_map(&params.v_map);
      if (params.o_tma) prefetch_tensor_map(&params.o_map);  // the consumers' TMA stores
    }
    constexpr unsigned kKvBytes = cfg.kv_tile_bytes();
    // Q is read by one CTA once; K and V by every query block of their heads.
    const std::uint64_t read_once = l2_evict_first();
    const std::uint64_t read_often = params.kv_evict_last ? l2_evict_last() : l2_evict_normal();
    // Per tile, with one Q buffer: K_0 first (its ring slot is usually free already), then the
    // tile index and Q once the consumers are done with the previous Q, then the rest of K and
    // V. With two Q buffers the buffer is free already (the consumers released it a tile ago):
    // the tile index and Q go first, so Q arrives while the consumers finish the previous tile.
    int kv_it = 0, q_pass = 0;
    for (int tile = static_cast<int>(blockIdx.x);; ++q_pass) {
      const bool valid = tile < params.num_tiles;
      const TileWork w = tile_work(valid ? tile : 0);
      const int n_blocks = valid ? w.n_blocks : 0;
      const int hk = w.coords.hk, b = w.coords.b;
      auto load_k = [&](int i) {
        const int it = kv_it + i, slot = it % kStages;
        mbarrier_wait(&bars.k_empty[slot], ((it / kStages) & 1) ^ 1);
        mbarrier_arrive_expect_tx(&bars.k_full[slot], kKvBytes);
        T* dst = k_tiles + slot * kBlockN * kDim;
#pragma unroll
        for (int cb = 0; cb < kColBlocks; ++cb)
          tma_load_4d(dst + cb * kBlockN * 64, &params.k_map, &bars.k_full[slot], cb * 64,
                      (w.n_block_begin + i) * kBlockN, hk, b, read_often);
      };
      auto load_v = [&](int i) {
        const int it = kv_it + i, slot = it % kStages;
        mbarrier_wait(&bars.v_empty[slot], ((it / kStages) & 1) ^ 1);
        mbarrier_arrive_expect_tx(&bars.v_full[slot], kKvBytes);
        T* dst = v_tiles + slot * kBlockN * kDim;
#pragma unroll
        for (int cb = 0; cb < kColBlocks; ++cb)
          tma_load_4d(dst + cb * kBlockN * 64, &params.v_map, &bars.v_full[slot], cb * 64,
                      (w.n_block_begin + i) * kBlockN, hk, b, read_often);
      };
      const int q_slot = q_pass % kQStages;
      if (leader) {
        if (kQStages == 1 && n_blocks > 0) load_k(0);
        mbarrier_wait(&bars.q_empty[q_slot][0], ((q_pass / kQStages) & 1) ^ 1);
      }
      __syncwarp();
      if (q_pass > 0) named_barrier_sync(kTileEmptyBarrier, kTileEmptyThreads);
      if (leader) {
        bars.tile[q_pass & 1] = valid ? tile : -1;
        if (valid) bars.work[q_pass & 1] = w;
      }
      __syncwarp();
#pragma unroll
      for (int c = 0; c < kConsumerGroups; ++c)
        named_barrier_arrive(kTileFullBarrier + c, kTileFullThreads);
      if (leader) {
        // Each warpgroup's 64 rows as soon as that warpgroup has freed its part of the buffer
        // (warpgroup 0's was waited for above, before the tile index went out).
#pragma unroll
        for (int c = 0; c < kConsumerGroups; ++c) {
          if (c > 0 && valid)
            mbarrier_wait(&bars.q_empty[q_slot][c], ((q_pass / kQStages) & 1) ^ 1);
          if (n_blocks > 0) {
            mbarrier_arrive_expect_tx(&bars.q_full[q_slot][c], kQBytesPerGroup);
            T* const q_dst = q_tiles + q_slot * kBlockM * kDim + c * 64 * 64;
#pragma unroll
            for (int cb = 0; cb < kColBlocks; ++cb)
              tma_load_4d(q_dst + cb * kBlockM * 64, &params.q_map, &bars.q_full[q_slot][c],
                          cb * 64, w.coords.m0 + c * 64, w.coords.h, b, read_once);
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
        if (kQStages == 1 && kDim == 128 && params.early_claim && next < params.num_tiles) {
          int m_block, bh;
          tile_at(params, next, m_block, bh);
#pragma unroll
          for (int r = 0; r < kBlockM; r += 64)
#pragma unroll
            for (int cb = 0; cb < kColBlocks; ++cb)
              tma_prefetch_4d(&params.q_map, cb * 64, m_block * kBlockM + r, bh % p.heads_q,
                              bh / p.heads_q);
        }
        if (kQStages > 1 && n_blocks > 0) load_k(0);
        for (int i = 0; i < n_blocks; ++i) {
          if (i + 1 < n_blocks) load_k(i + 1);
          load_v(i);
        }
        tile = params.early_claim ? next : next_tile(params);
      }
      kv_it += n_blocks;
      tile = __shfl_sync(0xffffffffu, tile, 0);
    }
    if (leader) finish_schedule(params);
    return;
  }

  // ----------------------------------------------------------------------------- consumers
  setmaxnreg_inc<cfg.consumer_registers>();
  const int consumer = warp_group - 1;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp_in_group = (static_cast<int>(threadIdx.x) / 32) % 4;
  const int g = lane / 4, t = lane % 4;
  const T* q_group = q_tiles + consumer * 64 * 64;  // this warpgroup's rows of the current Q

  // Ping-pong: a warpgroup issues its GEMMs only in its turn and then hands the turn to the next
  // one (round robin), so one warpgroup's softmax runs while another's GEMMs occupy the tensor
  // cores.
  const bool ping_pong = params.ping_pong;
  auto take_turn = [&] {
    if (ping_pong) named_barrier_sync(kTurnBarrier + consumer, 256);
  };
  auto pass_turn = [&] {
    if (ping_pong) named_barrier_arrive(kTurnBarrier + (consumer + 1) % kConsumerGroups, 256);
  };
  if (consumer == kConsumerGroups - 1) pass_turn();  // warpgroup 0 goes first
  // A tile's first S and its last P V take a turn unless the configuration says otherwise
  // (Sm90TileConfig::first_turn, finish_turn: dropping them keeps a warpgroup's tile end from
  // holding back the other warpgroup's, but gains nothing measurable). Both warpgroups of a tile
  // take the same number of turns: turns(n) for n key blocks.
  const bool first_turn = params.first_turn, finish_turn = params.finish_turn;
  auto turns = [&](int n) {
    return n > 0 ? n - 1 + (first_turn ? 1 : 0) + (finish_turn ? 1 : 0) : 0;
  };

  float acc_o[kDTiles][4];
  // At D > 128 Q's descriptors are one base plus a constant per k-step, added by an opaque
  // (volatile) instruction where it is used: otherwise the compiler hoists all kDim / 16 of them
  // out of the key loop as live 64-bit values, and at D = 256 ptxas spills them inside the loop.
  // (At D <= 128 the hoisted descriptors fit, and the opaque add made the general kernel spill.)
  constexpr bool kOpaqueQDesc = kDim > 128;
  static_assert(!kOpaqueQDesc || kQStages == 1, "q_desc0 is computed once, for one Q buffer");
  const std::uint64_t q_desc0 = sw128_desc(q_group, 16, 1024);
  // K and V descriptors: the ring's low word (sw128_desc_lo) plus the slot's and the k-step's
  // byte offsets, one 32-bit add each.
  constexpr std::uint32_t kTileBytes = kBlockN * kDim * sizeof(T);
  using POperand = std::uint32_t[kBlockN / 16][4];  // P, the P V wgmma's register operand
  const std::uint32_t k_ring_lo = sw128_desc_lo(k_tiles, 16);
  const std::uint32_t v_ring_lo = sw128_desc_lo(v_tiles, kBlockN * 128);
  auto issue_qk = [&](float (&s)[kNTiles][4], int slot) {
    const std::uint32_t k_lo = k_ring_lo + ((slot * kTileBytes) >> 4);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kDim / 16; ++ks) {
      const int col_block = ks / 4, in_row = (ks % 4) * 16;  // elements
      const int q_offset = col_block * kBlockM * 64 + in_row;  // elements
      const std::uint64_t q_desc =
          kOpaqueQDesc ? desc_add_volatile(q_desc0, q_offset * static_cast<int>(sizeof(T)) / 16)
                       : sw128_desc(q_group + q_offset, 16, 1024);
      wgmma_ss<T, kBlockN>(
          s, q_desc,
          sw128_desc_at(k_lo, (col_block * kBlockN * 64 + in_row) * sizeof(T), 1024), ks > 0);
    }
    wgmma_commit();
  };
  auto issue_pv = [&](const POperand& pa, int slot) {
    const std::uint32_t v_lo = v_ring_lo + ((slot * kTileBytes) >> 4);
    fence_operand(acc_o);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kBlockN / 16; ++ks)
      wgmma_rs<T, kDim>(acc_o, pa[ks], sw128_desc_at(v_lo, ks * 16 * 64 * sizeof(T), 1024));
    wgmma_commit();
  };
  // One arrival per warp; __syncwarp first so that every lane's reads of the slot happen before
  // the arrival that lets the producer overwrite it.
  auto release = [&](std::uint64_t* bar) {
    __syncwarp();
    if (lane == 0) mbarrier_arrive(bar);
  };
  auto rescale_o = [&](const float (&rescale)[2]) {
    if (!__any_sync(0xffffffffu, rescale[0] != 1.0f || rescale[1] != 1.0f)) return;
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[dt][e] *= rescale[e >> 1];
  };
  // P as wgmma A fragments: the C fragments of n8 tiles 2k and 2k+1 form k16 step k.
  auto to_operand = [&](const float (&s)[kNTiles][4], POperand& pa) {
#pragma unroll
    for (int ks = 0; ks < kBlockN / 16; ++ks) {
      pa[ks][0] = MmaType<T>::pack(s[2 * ks][0], s[2 * ks][1]);
      pa[ks][1] = MmaType<T>::pack(s[2 * ks][2], s[2 * ks][3]);
      pa[ks][2] = MmaType<T>::pack(s[2 * ks + 1][0], s[2 * ks + 1][1]);
      pa[ks][3] = MmaType<T>::pack(s[2 * ks + 1][2], s[2 * ks + 1][3]);
    }
  };

#ifdef TILEATTN_FWD_TRACE
  bool tracing_tiles = false;
  if (blockIdx.x == 0 && warp_in_group == 0 && lane == 0) {
    const unsigned launch = atomicAdd(&g_trace_launches[consumer], 1u);
    tracing_tiles = launch % kTracePeriod == kTraceLaunch;
    if (tracing_tiles) g_trace_launch = launch;
  }
  // The key blocks of the first tile from kTraceBlockTile on with at least kTraceMinBlocks of
  // them (a warm tile boundary; under a causal mask not one of the short tiles).
  bool tracing = false, block_traced = false;
#endif
  const float speculation_limit = exp2f(params.rescale_threshold);  // see softmax
  // Speculating kernels start a tile's first block from a guessed running max, the thread's
  // row's final running max in its previous tile, instead of computing the block's max (the
  // eager path, ~20% longer, on a tile's critical path where no P V overlaps it). The guess is
  // checked as later blocks are: every probability at most 2^threshold; and, since it may also
  // be too high, each row's sum at least kGuessFloor (bf16: its largest probability >= 2^-67,
  // so nothing that the exponentials flush to 0 could weigh in f32; f16, with its 5-bit
  // exponent: >= 2^-13, so no P, subnormal or not, rounds by more than the largest one's own
  // rounding). A failed guess redoes the block eagerly.
  constexpr float kGuessFloor = std::is_same_v<T, __nv_bfloat16> ? 0x1p-60f : 0x1p-6f;
  float max_guess[2] = {-INFINITY, -INFINITY};
  int kv_it = 0;
  for (int q_pass = 0;; ++q_pass) {
    TILEATTN_TRACE_TILE(q_pass, 0);
    named_barrier_sync(kTileFullBarrier + consumer, kTileFullThreads);
    const int tile_index = bars.tile[q_pass & 1];
    if (tile_index < 0) break;
    const TileWork w = bars.work[q_pass & 1];
#ifdef TILEATTN_FWD_TRACE
    tracing = tracing_tiles && !block_traced && q_pass >= kTraceBlockTile &&
              w.n_blocks >= kTraceMinBlocks;
    block_traced = block_traced || tracing;
#endif
    TILEATTN_TRACE_TILE(q_pass, 1);
    named_barrier_arrive(kTileEmptyBarrier, kTileEmptyThreads);
    const int q_slot = q_pass % kQStages;
    mbarrier_wait(&bars.q_full[q_slot][consumer], (q_pass / kQStages) & 1);
    TILEATTN_TRACE_TILE(q_pass, 2);
    if constexpr (kQStages > 1) q_group = q_tiles + q_slot * kBlockM * kDim + consumer * 64 * 64;
    if (w.n_blocks == 0) release(&bars.q_empty[q_slot][consumer]);
    const TileCoords& tile = w.coords;
    const int h = tile.h, b = tile.b;
    const int warp_row0 = tile.m0 + consumer * 64 + warp_in_group * 16;
    const int row0 = warp_row0 + g;  // rows row0, row0 + 8
    if constexpr (kRereadCoords) {
      __syncwarp();  // the previous tile's epilogue has read the slot
      if (lane == 0) {
        int* slot = bars.out_coords[consumer * 4 + warp_in_group];
        slot[0] = b;
        slot[1] = h;
        slot[2] = warp_row0;
      }
      __syncwarp();
    }

#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[dt][e] = 0.0f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};  // base-2 units
    // Speculating kernels: whether the warp may try a block against its running maxima (the
    // lazy rescaling is on and every row of the warp has a finite max), voted where the maxima
    // change (here and after an eager block) instead of in every block.
    [[maybe_unused]] bool speculate_ok = false;
    auto update_speculate_ok = [&] {
      speculate_ok = params.rescale_threshold > 0.0f &&
                     __all_sync(0xffffffffu, row_max[0] != -INFINITY && row_max[1] != -INFINITY);
    };
    if constexpr (kSpeculate) {
      row_max[0] = max_guess[0];
      row_max[1] = max_guess[1];
      update_speculate_ok();
    }

    GeneralScoreRow general_rows[2];
    if constexpr (kGeneral) {
      const float slope = alibi_slope(p, b, h);
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        GeneralScoreRow& r = general_rows[hh];
        r.i = row0 + 8 * hh;
        r.slope = slope;
        r.mask_row = mask_row_offset(p, b, h, r.i);
        r.distance0 = r.i + tile.klen - p.len_q;
        tile.visible(r.i, r.first, r.last);
      }
    }

    // The exponentials of row hh (0: row0, 1: row0 + 8) against `base` for the block's first
    // `active` n8 tiles (the others' probabilities are 0, see softmax): in place of the scores,
    // or (speculating kernels) packed into pa as P, the wgmma operand (to_operand's layout), so
    // that the scores stay. Returns this thread's sum of them.
    // (Generic lambdas here take their arrays as auto&: a parameter type built from the
    // kernel's constexpr locals made nvcc 13.0's front end crash.)
    auto exp_row = [&](auto active, auto& s, auto& pa, int hh, float scale, float base) {
      constexpr int kActive = decltype(active)::value;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        float y[2] = {0.0f, 0.0f};
        if (nt < kActive) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float x = fmaf(s[nt][2 * hh + e], scale, -base);
            y[e] = nt % kPolyEvery == kPolyEvery - 1 ? exp2_poly(x) : exp2_approx(x);
            sum += y[e];
          }
        }
        if constexpr (kSpeculate) {
          pa[nt / 2][(nt % 2) * 2 + hh] = MmaType<T>::pack(y[0], y[1]);
        } else {
          s[nt][2 * hh] = y[0];
          s[nt][2 * hh + 1] = y[1];
        }
      }
      return sum;
    };

    // The online softmax of a block's scores (masked already) over its first `active` n8 tiles:
    // s -> probabilities (see exp_row); returns the factors the running output must be
    // rescaled by.
    auto softmax_tiles = [&](auto active, auto first, auto& s, auto& pa, int n0, auto& rescale) {
      constexpr int kActive = decltype(active)::value;
      // Fast path: max on raw scores (scale > 0), p = 2^(x scale log2 e - max): one FFMA and
      // one MUFU per score. General path: scores are already base-2 logits.
      const float scale = kGeneral ? 1.0f : p.scale_log2;
      float threshold = params.rescale_threshold;
      if constexpr (kSpeculate && kActive == kNTiles) {  // (half blocks: eager, less code)
        // Speculation (fast kernels, lazy rescaling): the exponentials against the running max
        // without the block's max. They are kept when every one is at most 2^threshold, which
        // a thread's sum over its elements bounds; otherwise (rare after a row's first block)
        // the warp redoes the block from the scores, moving the max eagerly.
        if (speculate_ok) {
          float sums[2];
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) sums[hh] = exp_row(active, s, pa, hh, scale, row_max[hh]);
          bool kept = sums[0] <= speculation_limit && sums[1] <= speculation_limit;
          if constexpr (decltype(first)::value) {  // the guessed max (see kGuessFloor)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
              float row = sums[hh] + __shfl_xor_sync(0xffffffffu, sums[hh], 1);
              row += __shfl_xor_sync(0xffffffffu, row, 2);
              kept = kept && row >= kGuessFloor;
            }
          }
          if (__all_sync(0xffffffffu, kept)) {
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
              rescale[hh] = 1.0f;
              row_sum[hh] += sums[hh];
            }
            return;
          }
          threshold = 0.0f;
        }
      }
      if constexpr (decltype(first)::value) {  // eager: the block's own max replaces a guess
        row_max[0] = -INFINITY;
        row_max[1] = -INFINITY;
      }
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        // The row's maximum: in the fast kernels as a tree (depth log2 of the row's elements
        // instead of one chain of dependent FMNMX: the max is on the softmax's critical path);
        // in the general kernels a chain (the tree raised their spills at D 128 and 256).
        float tree[kActive];
#pragma unroll
        for (int nt = 0; nt < kActive; ++nt) tree[nt] = fmaxf(s[nt][2 * hh], s[nt][2 * hh + 1]);
        if constexpr (kGeneral) {
#pragma unroll
          for (int nt = 1; nt < kActive; ++nt) tree[0] = fmaxf(tree[0], tree[nt]);
        } else {
          max_tree(tree);
        }
        float block_max = tree[0];
        block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 1));
        block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 2));
        // The running max moves only when a block's max exceeds it by more than the threshold
        // (8: probabilities stay below 2^8, exactly renormalised at the end), so most blocks
        // leave O unscaled.
        const float scaled_max = block_max * scale;
        const float new_max = scaled_max > row_max[hh] + threshold ? scaled_max : row_max[hh];
        const float base = new_max == -INFINITY ? 0.0f : new_max;  // all masked so far
        rescale[hh] = new_max == row_max[hh] ? 1.0f : exp2_approx(row_max[hh] - base);
        row_max[hh] = new_max;
        row_sum[hh] = row_sum[hh] * rescale[hh] + exp_row(active, s, pa, hh, scale, base);
        if constexpr (kGeneral) {
          if (p.dropout_threshold != 0) {
#pragma unroll
            for (int nt = 0; nt < kNTiles; ++nt)
              apply_dropout_pair(p, b, h, row0 + 8 * hh, n0 + nt * 8 + 2 * t, s[nt][2 * hh],
                                 s[nt][2 * hh + 1]);
          }
        }
      }
      if constexpr (kSpeculate) update_speculate_ok();
    };

    // Scores s of block n_block -> probabilities with the online softmax (softmax_tiles).
    // Where the block is masked (a causal diagonal, a window or length edge) and no row of the
    // warp sees a key in its second half (the diagonal's upper rows), that half's probabilities
    // are 0 without their masks, maxima or exponentials.
    // (first: std::true_type for a tile's first block; see max_guess.)
    auto softmax = [&](auto first, auto& s, auto& pa, int n_block, auto& rescale) {
      const int n0 = n_block * kBlockN;
      [[maybe_unused]] bool right_empty = false;  // no row of the warp sees its second half
      if constexpr (kGeneral) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh)
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              float& x = s[nt][2 * hh + e];
              x = general_score_log2(p, general_rows[hh], n0 + nt * 8 + 2 * t + e, x);
            }
      } else {
        // (A non-finite raw score is not turned into NaN here as in the sm80 kernel: one FFMA
        // per score costs this softmax 5-10% at D 64 and 128. NaN and +inf reach the sum on
        // their own; a -inf raw score weighs 0, see docs/semantics.md.)
        if (n0 < w.first_bottom || n0 + kBlockN > w.last_top) {  // a window / length edge
          if constexpr (kHalfMasked) {
            int first[2], last[2];  // each row's visible keys, relative to this thread's column
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
              tile.visible(row0 + 8 * hh, first[hh], last[hh]);
              first[hh] -= n0 + 2 * t;
              last[hh] -= n0 + 2 * t;
            }
            right_empty = __all_sync(0xffffffffu, max(last[0], last[1]) <= kBlockN / 2 - 2 * t);
            auto mask = [&](int nt) {  // (per n8 tile, both rows: the faster order)
#pragma unroll
              for (int hh = 0; hh < 2; ++hh)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                  const int j = nt * 8 + e;
                  if (j < first[hh] || j >= last[hh]) s[nt][2 * hh + e] = -INFINITY;
                }
            };
#pragma unroll
            for (int nt = 0; nt < kHalfTiles; ++nt) mask(nt);
            if (!right_empty) {
#pragma unroll
              for (int nt = kHalfTiles; nt < kNTiles; ++nt) mask(nt);
            }
          } else {
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
              int first, last;
              tile.visible(row0 + 8 * hh, first, last);
              first -= n0 + 2 * t;
              last -= n0 + 2 * t;
              mask_row_outside<0, kNTiles>(s, hh, first, last);
            }
          }
        }
      }
      constexpr std::integral_constant<int, kNTiles> kAll{};
      if constexpr (kHalfMasked) {
        if (right_empty)
          softmax_tiles(std::integral_constant<int, kHalfTiles>{}, first, s, pa, n0, rescale);
        else
          softmax_tiles(kAll, first, s, pa, n0, rescale);
      } else {
        softmax_tiles(kAll, first, s, pa, n0, rescale);
      }
    };

    // Whether this warpgroup's rows see no key of the tile's last block (kSkipLast): the visible
    // keys' end grows with the row, so the warpgroup's last row bounds all of them. n_wg: the
    // key blocks this warpgroup computes.
    bool last_skip = false;
    if constexpr (kSkipLast) {
      if (w.n_blocks > 0) {
        int first, last;
        tile.visible(tile.m0 + min(consumer * 64 + 63, tile.rows_in_block - 1), first, last);
        last_skip = last <= (w.n_block_begin + w.n_blocks - 1) * kBlockN;
      }
    }
    const int n_wg = w.n_blocks - (last_skip ? 1 : 0);

    // The epilogue's row values, 1 / l and the logsumexp, and its first wait for the staging
    // buffer: where the config says so (early_epilogue_rows), done while the tile's last P V
    // runs (finish) rather than after it. After it, 1 / l waits ~500 clocks behind the other
    // warpgroup's exponentials in the MUFU queue and the buffer ~250 (clock trace, D 64,
    // L 1024).
    float inv_sum[2] = {0.0f, 0.0f}, row_lse[2] = {-INFINITY, -INFINITY};
    constexpr bool kStagedOutput = cfg.o_stage_bytes() > 0, kEarlyRows = cfg.early_epilogue_rows;
    bool stage_free = false;  // the staging buffer's first wait was done in finish
    auto finalise_rows = [&] {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float l = row_sum[hh];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        // l >= 1 where positive (the running max's own term is 2^0), at most 2^8 per key.
        inv_sum[hh] = l > 0.0f ? __fdividef(1.0f, l) : 0.0f;
        row_lse[hh] = l > 0.0f ? (row_max[hh] + __log2f(l)) * kLn2 : -INFINITY;
        if (l != l) row_lse[hh] = NAN;  // a visible non-finite score (see the epilogue)
      }
    };
    // The last TMA store (the previous tile's) has read the staging buffer, and every thread
    // of the warpgroup knows it.
    auto wait_stage_free = [&](int group) {
      if (params.o_tma && thread_index_now() % 128 == 0) bulk_wait_all<true>();
      named_barrier_sync(kStageBarrier + group, 128);
    };

    // Order inside one iteration (as FlashAttention-3): the O rescale and the P conversion are
    // placed where no in-flight wgmma reads their registers (ptxas would otherwise serialise
    // the wgmma pipeline, warning C7513).
    if (n_wg > 0) {
      float s[kNTiles][4];
      // P buffers. Speculating kernels keep the scores (a block may be redone from them) and
      // pack P during the softmax into the buffer that P_{j-1} V_{j-1}, still running, does
      // not read: two buffers, and the loop unrolled by two so that each is named statically
      // (ptxas coalesces a copy of one into the other, and then serialises the wgmmas).
      // The others overwrite the scores and pack P into one buffer once P_{j-1} V_{j-1} is done.
      POperand pa0;
      [[maybe_unused]] POperand pa1;  // speculating kernels only
      float rescale[2];
      {
        const int slot = kv_it % kStages;
        TILEATTN_TRACE(0, 0);
        if (first_turn) take_turn();
        TILEATTN_TRACE(0, 1);
        mbarrier_wait(&bars.k_full[slot], (kv_it / kStages) & 1);
        TILEATTN_TRACE(0, 2);
        issue_qk(s, slot);
        TILEATTN_TRACE(0, 3);
        if (first_turn) pass_turn();
        TILEATTN_TRACE(0, 4);
        wgmma_wait<0>();
        fence_operand(s);
        TILEATTN_TRACE(0, 5);
        release(&bars.k_empty[slot]);
        if (kQStages == 1 && n_wg == 1) release(&bars.q_empty[q_slot][consumer]);
        softmax(std::true_type{}, s, pa0, w.n_block_begin, rescale);
        TILEATTN_TRACE(0, 6);
        TILEATTN_TRACE(0, 7);
        if constexpr (!kSpeculate) to_operand(s, pa0);
      }
      // Block i: P_{i-1} is in pa_prev; P_i goes to pa_next (the same buffer unless speculating).
      auto step = [&](int i, POperand& pa_prev, POperand& pa_next) {
        const int it = kv_it + i, slot = it % kStages, prev = (it - 1) % kStages;
        TILEATTN_TRACE(i, 0);
        take_turn();
        TILEATTN_TRACE(i, 1);
        mbarrier_wait(&bars.k_full[slot], (it / kStages) & 1);
        TILEATTN_TRACE(i, 2);
        issue_qk(s, slot);
        TILEATTN_TRACE(i, 3);
        rescale_o(rescale);
        mbarrier_wait(&bars.v_full[prev], ((it - 1) / kStages) & 1);
        issue_pv(pa_prev, prev);
        pass_turn();
        TILEATTN_TRACE(i, 4);
        wgmma_wait<1>();  // S_j is ready; P_{j-1} V_{j-1} may still run
        fence_operand(s);
        TILEATTN_TRACE(i, 5);
        release(&bars.k_empty[slot]);
        if (kQStages == 1 && i == n_wg - 1) release(&bars.q_empty[q_slot][consumer]);
        softmax(std::false_type{}, s, pa_next, w.n_block_begin + i, rescale);
        TILEATTN_TRACE(i, 6);
        wgmma_wait<0>();
        fence_operand(acc_o);
        TILEATTN_TRACE(i, 7);
        release(&bars.v_empty[prev]);
        if constexpr (!kSpeculate) to_operand(s, pa_next);
      };
      auto finish = [&](const POperand& pa_last) {  // the last block's P V
        // With two Q buffers the warpgroup frees its Q here, after its last S, rather than by a
        // test in every block (the producer needs the buffer only for the tile after next).
        if constexpr (kQStages > 1) release(&bars.q_empty[q_slot][consumer]);
        const int it = kv_it + n_wg - 1, last = it % kStages;
        rescale_o(rescale);
        if (finish_turn) take_turn();
        mbarrier_wait(&bars.v_full[last], (it / kStages) & 1);
        issue_pv(pa_last, last);
        if (finish_turn) pass_turn();
        if constexpr (kEarlyRows) {
          finalise_rows();
          if constexpr (kStagedOutput) {
            if (p.vector_stores) {
              wait_stage_free(consumer);
              stage_free = true;
            }
          }
        }
        wgmma_wait<0>();
        fence_operand(acc_o);
        release(&bars.v_empty[last]);
      };
      if constexpr (kSpeculate) {
        for (int i = 1;; i += 2) {
          if (i >= n_wg) {
            finish(pa0);
            break;
          }
          step(i, pa0, pa1);
          if (i + 1 >= n_wg) {
            finish(pa1);
            break;
          }
          step(i + 1, pa1, pa0);
        }
      } else {
        for (int i = 1; i < n_wg; ++i) step(i, pa0, pa0);
        finish(pa0);
      }
      kv_it += w.n_blocks;
      if constexpr (kSpeculate) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh)
          if (row_max[hh] != -INFINITY) max_guess[hh] = row_max[hh];
      }
    }
    if (last_skip) {
      // The skipped block: the turns the other warpgroup takes beyond this one's, and its K
      // and V slots, released once loaded (so that each release counts towards this use of the
      // slot).
      if (n_wg == 0) kv_it += w.n_blocks;
      const int it = kv_it - 1, slot = it % kStages;
      for (int turn = turns(w.n_blocks) - turns(n_wg); turn > 0; --turn) {
        take_turn();
        pass_turn();
      }
      mbarrier_wait(&bars.k_full[slot], (it / kStages) & 1);
      release(&bars.k_empty[slot]);
      mbarrier_wait(&bars.v_full[slot], (it / kStages) & 1);
      release(&bars.v_empty[slot]);
      if (n_wg == 0) release(&bars.q_empty[q_slot][consumer]);
    }
    TILEATTN_TRACE_TILE(q_pass, 3);
#ifdef TILEATTN_FWD_TRACE
    if (tracing) g_trace_blocks[consumer] = w.n_blocks;
    if (tracing_tiles && q_pass < kTraceTiles) {
      g_trace_tile_blocks[consumer][q_pass] = w.n_blocks;
      g_trace_tile_count[consumer] = q_pass + 1;
    }
#endif

    // Epilogue: O / l, staged through shared memory (16-byte chunks XOR-swizzled by row, so
    // the fragment writes are free of bank conflicts) and written by TMA stores (or, without
    // Sm90TileConfig::tma_store, coalesced 16-byte stores) where the output is 16-bit with
    // aligned rows; any other output element by element from the registers. Then the
    // logsumexp.
    // Where ptxas spills (kRereadCoords), lane, warp and tile coordinates are read afresh here
    // (thread_index_now, the warp's out_coords slot) instead of being held across the main
    // loop: with shared memory taking nearly all of L1, the spill reloads go to L2
    // (long-scoreboard stalls of hundreds of cycles per tile at D = 256). The kernels without
    // spills keep them in registers (re-reading costs them 1-2% at L = 1024).
    int e_warp, e_lane, e_b, e_h, e_warp_row0;  // e_warp: consumer warp 0..7
    if constexpr (kRereadCoords) {
      const unsigned tid = static_cast<unsigned>(thread_index_now());
      e_warp = static_cast<int>(tid / 32u) - 4;
      e_lane = static_cast<int>(tid % 32u);
      const std::uint32_t slot =  // shared address of bars.out_coords[e_warp], from the symbol
          ((smem_address(smem_raw) + 1023u) & ~1023u) + kBarsOffset +
          static_cast<std::uint32_t>(offsetof(Sm90Barriers<kStages>, out_coords)) + e_warp * 12u;
      e_b = ld_shared_volatile(slot);
      e_h = ld_shared_volatile(slot + 4);
      e_warp_row0 = ld_shared_volatile(slot + 8);
    } else {
      e_warp = consumer * 4 + warp_in_group;
      e_lane = lane;
      e_b = b;
      e_h = h;
      e_warp_row0 = warp_row0;
    }
    const int e_g = e_lane / 4, e_t = e_lane % 4;
    const int e_row0 = e_warp_row0 + e_g;  // rows e_row0, e_row0 + 8
    if constexpr (!kEarlyRows) finalise_rows();
    // A poisoned row (a visible non-finite score made its sum NaN, or a visible non-finite V
    // its output) is NaN throughout, lse included.
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float check = 0.0f;
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt)
        check = fmaf(acc_o[dt][2 * hh], 0.0f, fmaf(acc_o[dt][2 * hh + 1], 0.0f, check));
      check += __shfl_xor_sync(0xffffffffu, check, 1);
      check += __shfl_xor_sync(0xffffffffu, check, 2);
      if (row_poisoned(row_lse[hh], check)) {
        inv_sum[hh] = NAN;
        row_lse[hh] = NAN;
      }
    }
    TILEATTN_TRACE_TILE(q_pass, 5);
    // The logsumexp first: two stores that need only the row values, issued before the staging
    // (after it they waited behind the TMA issue and the element path's set-up).
    if (p.lse != nullptr && e_t == 0) {
      float* lse_rows = p.lse + e_b * p.lse_stride_b + e_h * p.lse_stride_h;
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int i = e_row0 + 8 * hh;
        if (i < p.len_q) lse_rows[i * p.lse_stride_l] = row_lse[hh];
      }
    }
    bool stored = false;
    if constexpr (cfg.o_stage_bytes() > 0) {
      if (p.vector_stores) {
        // The warpgroup's 64 rows in column blocks of (64 rows, 64 columns), each row's 16-byte
        // chunks XOR-swizzled by row: the TMA map's 128-byte swizzle. kStageCols columns per
        // pass (D 256: two passes through one buffer).
        constexpr int kStageCols = cfg.o_stage_cols(), kPassTiles = kStageCols / 8;
        constexpr int kChunks = kStageCols / 8;  // 16-byte chunks per row and pass
        const int e_group = e_warp / 4;
        T* stage = o_stage + e_group * 64 * kStageCols;
        // Explicit shared-memory accesses: through the generic pointer ptxas emitted generic
        // (64-bit address) stores and loads.
        const std::uint32_t stage_address = smem_address(stage);
        auto stage_at = [&](int r, int chunk) {  // a shared-window address
          const int element = (chunk / 8) * 64 * 64 + r * 64 + ((chunk % 8) ^ (r & 7)) * 8;
          return stage_address + static_cast<std::uint32_t>(element * sizeof(T));
        };
        const int stage_barrier = kStageBarrier + e_group;
        const bool store_issuer = e_warp % 4 == 0 && e_lane == 0;
#pragma unroll
        for (int pass = 0; pass < kDim / kStageCols; ++pass) {
          // The last TMA store (the previous pass's or tile's) has read the buffer, and every
          // thread's reads of it are done (the first pass: in finish, unless the warpgroup
          // computed no key block).
          if (pass > 0 || !stage_free) wait_stage_free(e_group);
          TILEATTN_TRACE_TILE(q_pass, 6);
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int r = (e_warp % 4) * 16 + e_g + 8 * hh;
#pragma unroll
            for (int dt = 0; dt < kPassTiles; ++dt) {
              const int d_tile = pass * kPassTiles + dt;
              store_shared_u32(stage_at(r, dt) + 4 * e_t,
                               MmaType<T>::pack(acc_o[d_tile][2 * hh] * inv_sum[hh],
                                                acc_o[d_tile][2 * hh + 1] * inv_sum[hh]));
            }
          }
          if (params.o_tma) fence_proxy_async_shared();  // the writes, to the TMA store
          named_barrier_sync(stage_barrier, 128);
          TILEATTN_TRACE_TILE(q_pass, 7);
          const int row_base = e_warp_row0 - (e_warp % 4) * 16;
          if (params.o_tma) {
            if (store_issuer) {
#pragma unroll
              for (int cb = 0; cb < kStageCols / 64; ++cb)
                tma_store_4d(&params.o_map, stage + cb * 64 * 64, pass * kStageCols + cb * 64,
                             row_base, e_h, e_b);
              bulk_commit_group();
            }
            TILEATTN_TRACE_TILE(q_pass, 8);
          } else {
            T* out = static_cast<T*>(p.out) + e_b * p.o_stride_b + e_h * p.o_stride_h +
                     pass * kStageCols;
#pragma unroll
            for (int idx = e_lane + (e_warp % 4) * 32; idx < 64 * kChunks; idx += 128) {
              const int r = idx / kChunks, c = idx % kChunks;
              if (row_base + r < p.len_q && pass * kStageCols + c * 8 < p.dim_v)
                *reinterpret_cast<uint4*>(out +
                                          static_cast<std::int64_t>(row_base + r) * p.o_stride_l +
                                          c * 8) = load_shared_v4u(stage_at(r, c));
            }
          }
        }
        stored = true;
      }
    }
    if (!stored) {  // element-wise stores from the registers (no staging buffer, or odd strides)
      char* out_base = static_cast<char*>(p.out);
      const std::int64_t out_esize = p.out_type == ElemType::f32 ? 4 : 2;
      out_base += (e_b * p.o_stride_b + e_h * p.o_stride_h) * out_esize;
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const float inv = inv_sum[hh];
        const int i = e_row0 + 8 * hh;
        if (i >= p.len_q) continue;
        char* out_row = out_base + static_cast<std::int64_t>(i) * p.o_stride_l * out_esize;
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt) {
          const int col = dt * 8 + 2 * e_t;
          const float x = acc_o[dt][2 * hh] * inv, y = acc_o[dt][2 * hh + 1] * inv;
          if (p.pair_stores && col + 1 < p.dim_v) {
            store_pair(out_row, col, p.out_type, x, y);
          } else {
            if (col < p.dim_v) store_elem(out_row, col, p.out_type, x);
            if (col + 1 < p.dim_v) store_elem(out_row, col + 1, p.out_type, y);
          }
        }
      }
    }
    TILEATTN_TRACE_TILE(q_pass, 4);
  }
  // The last TMA stores read shared memory, which must outlive them (a no-op in threads that
  // issued none).
  if (params.o_tma) bulk_wait_all<false>();
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

}  // namespace tileattn::cuda
