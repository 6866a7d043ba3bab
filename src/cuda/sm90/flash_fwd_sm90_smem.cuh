// The sm90 forward's shared memory, from a 1024-byte-aligned base (the 128-byte swizzle's
// atom): q_stages Q tiles (block_m, D), the K ring and the V ring (stages x (block_n, D) each),
// the output staging buffer (block_m, o_stage_cols), then a kilobyte of barriers and hand-over
// words (Sm90Barriers).
//
// The aligned base is smem_raw plus an offset computed from the shared-window address, never
// the generic pointer rounded: with the pointer rounded, ptxas no longer knows the buffers are
// shared memory and emits generic 64-bit loads and stores for the barrier words, the tile
// hand-over and the staging buffer. The kernel computes the base; each part derives its buffers
// from it with the offsets below.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/sm90/flash_fwd_sm90_scheduler.cuh"
#include "cuda/sm90/flash_fwd_sm90_traits.cuh"

namespace tileattn::cuda {

template <int kStages>
struct Sm90Barriers {
  // Per Q buffer (cfg.q_stages of them used) and consumer warpgroup: each warpgroup's 64 rows
  // load and free on their own, so that the first warpgroup's next rows need not wait for the
  // second warpgroup to finish the tile.
  std::uint64_t q_full[2][kSm90ConsumerWarps / 4], q_empty[2][kSm90ConsumerWarps / 4];
  // The K and V rings: "full" counts the TMA bytes, "empty" one arrival per consumer warp.
  std::uint64_t k_full[kStages], k_empty[kStages];
  std::uint64_t v_full[kStages], v_empty[kStages];
  Sm90TileHandOver hand_over;
  // Per consumer warp: batch, head, first query row and the sequence's row end (rows in the
  // tensors) of its current tile, written by its lane 0 when the tile starts and read by the
  // epilogue (Sm90FwdEpilogue::publish_rows).
  int out_coords[kSm90ConsumerWarps][4];
};

// Offsets from the aligned base.
template <class K>
struct Sm90FwdSmem {
  using T = typename K::Element;
  // In elements: the Q tiles (the K ring follows them), one ring (the V ring follows the K
  // ring), and where the staging buffer starts.
  static constexpr int kQElements = K::kQStages * K::kBlockM * K::kDim;
  static constexpr int kKvElements = K::kStages * K::kBlockN * K::kDim;
  static constexpr int kOStageOffset = kQElements + 2 * kKvElements;
  // Bytes from the aligned base to the barrier block.
  static constexpr int kBarsOffset =
      static_cast<int>(kOStageOffset * sizeof(T)) + K::cfg.o_stage_bytes();
  static_assert(sizeof(Sm90Barriers<K::kStages>) <= 1024, "the barrier block's kilobyte");
};

}  // namespace tileattn::cuda
