// The sm90 forward kernel's parameter and its compile-time constants: every number the parts
// (flash_fwd_sm90.cuh lists them) derive from the bucket's Sm90TileConfig and the score policy
// (flash_fwd_sm90_scores.cuh).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/flash_fwd_params.hpp"
#include "cuda/sm90/async.cuh"
#include "cuda/sm90/tile_config.hpp"

namespace tileattn::cuda {

// The kernel parameter: the common parameters plus TMA descriptors of Q, K and V, each a 4-D
// tensor (head dim, length, heads, batch) read in boxes of (64 columns, rows) with the 128-byte
// swizzle: a tile is stored as head_dim / 64 column blocks of (rows, 64), the wgmma canonical
// K-major layout.
struct Sm90FwdParams {
  FlashFwdParams base;
  CUtensorMap q_map, k_map, v_map;
  CUtensorMap o_map;    // the output in boxes of (64 columns, 64 rows), if o_tma
  bool o_tma;           // the staged output leaves shared memory by TMA stores
  int num_tiles;        // query blocks x heads x batch
  int group_heads;      // (batch, head) pairs per scheduling group (their K/V fit in L2 together)
  unsigned sched_slot;  // this launch's tile counter (kSchedulerSlots of them, reused in turn)
  bool ping_pong;       // consumer warpgroups take turns to issue their GEMMs
  // Which of a tile's GEMM issues take a turn besides the key-block steps: the first block's S
  // and the last block's P V (see Sm90PingPong).
  bool first_turn, finish_turn;
  bool kv_evict_last;       // K/V loads carry the L2 evict-last hint (else evict-normal)
  float rescale_threshold;  // lazy rescaling of the online softmax, log2 units (0: eager)
  bool early_claim;  // tiles of equal work: the producer takes its next tile as a tile starts
};

inline constexpr int kSm90ConsumerWarps = 8;  // two consumer warpgroups

// Named barriers: consumer warpgroup w (of n) waits for its turn on kTurnBarrier + w, syncs its
// output staging on kTurnBarrier + n + w and takes its next tile index on kTurnBarrier + 2n + w;
// the producer warp waits on kTurnBarrier + 3n until every warpgroup has read the previous index.
// The tile index goes through named barriers rather than the Q mbarriers because
// compute-sanitizer's racecheck models bar.sync / bar.arrive but not mbarrier parity waits.
inline constexpr int kTurnBarrier = 1;

// Element type T, head-dim bucket kBucket and score policy Scores (CausalWindowScores or
// GeneralScores) of one kernel instantiation.
template <typename T, int kBucket, typename Scores>
struct Sm90FwdTraits {
  using Element = T;
  using ScorePolicy = Scores;
  static constexpr Sm90TileConfig cfg = sm90_tile_config(kBucket);
  static constexpr int kDim = cfg.head_dim, kBlockM = cfg.block_m, kBlockN = cfg.block_n;
  static constexpr int kStages = cfg.stages, kConsumerWarps = cfg.consumer_warp_groups * 4;
  static constexpr int kQStages = cfg.q_stages;
  static_assert(kQStages == 1 || kQStages == 2);
  static constexpr int kNTiles = kBlockN / 8, kDTiles = kDim / 8, kColBlocks = kDim / 64;
  static constexpr int kHalfTiles = kNTiles / 2;  // n8 tiles in half a key block
  static constexpr bool kHalfMasked = cfg.half_masked_blocks && Scores::kHalfMaskedBlocks;
  // Every kPolyEvery-th n8 tile's exponentials by polynomial instead of the MUFU (exp2_poly).
  static constexpr int kPolyEvery = cfg.exp_poly_every > 0 ? cfg.exp_poly_every : kNTiles + 1;
  static_assert(kBlockM == 64 * cfg.consumer_warp_groups && kDim % 64 == 0 && kBlockN % 16 == 0);
  static_assert(kConsumerWarps == kSm90ConsumerWarps);
  static constexpr bool kSpeculate = cfg.speculate_max && Scores::kSpeculation;
  // The kernels where ptxas spills re-read the epilogue's coordinates (Sm90FwdEpilogue), and
  // so do the speculating ones (their scores and a second P buffer: 32 more registers).
  static constexpr bool kRereadCoords = kDim > 128 || Scores::kSpills || kSpeculate;
  // Speculating kernels at block_n 64 (D 256): a tile's last key block may hold no key that a
  // warpgroup's rows see (the causal diagonal's second block, for warpgroup 0). That
  // warpgroup's loop then ends a block early; it takes the block's turns and releases its K / V
  // slots without GEMMs. (Trimming half a block at block_n 128 by a branch around a wgmma, or
  // a predicated one, made ptxas serialise the wgmmas: C7520.)
  static constexpr bool kSkipLast = kSpeculate && kBlockN == 64;
  static constexpr int kConsumerGroups = cfg.consumer_warp_groups;
  static constexpr int kQBytesPerGroup = cfg.q_tile_bytes() / kConsumerGroups;  // 64 rows
  static_assert(kBlockM == 64 * kConsumerGroups, "a consumer warpgroup owns 64 query rows");
  static constexpr int kStageBarrier = kTurnBarrier + kConsumerGroups;  // + consumer: staging
  static constexpr int kTileFullBarrier = kTurnBarrier + 2 * kConsumerGroups;  // + consumer
  static constexpr int kTileEmptyBarrier = kTileFullBarrier + kConsumerGroups;
  static constexpr int kTileFullThreads = 32 + 128;
  static constexpr int kTileEmptyThreads = 32 + 128 * kConsumerGroups;
  static_assert(kTileEmptyBarrier <= 15, "named barriers");
  static_assert(cfg.producer_registers * 128 +
                        cfg.consumer_registers * 128 * cfg.consumer_warp_groups <=
                    setmaxnreg_pool(cfg.threads()),
                "register budget");
  // At D > 128 Q's descriptors are one base plus a constant per k-step, added by an opaque
  // (volatile) instruction where it is used: otherwise the compiler hoists all kDim / 16 of them
  // out of the key loop as live 64-bit values, and at D = 256 ptxas spills them inside the loop.
  // (At D <= 128 the hoisted descriptors fit, and the opaque add made the general kernel spill.)
  static constexpr bool kOpaqueQDesc = kDim > 128;
  static_assert(!kOpaqueQDesc || kQStages == 1, "q_desc0 is computed once, for one Q buffer");
  static constexpr std::uint32_t kKvTileBytes = kBlockN * kDim * sizeof(T);  // a ring slot
  static constexpr bool kStagedOutput = cfg.o_stage_bytes() > 0;
  static constexpr bool kEarlyRows = cfg.early_epilogue_rows;
  // The scores of a key block (m64n{block_n} accumulator fragments) and P, the P V wgmma's
  // register operand.
  using SFragment = float[kNTiles][4];
  using POperand = std::uint32_t[kBlockN / 16][4];
  using OFragment = float[kDTiles][4];  // the output accumulator
};

}  // namespace tileattn::cuda
