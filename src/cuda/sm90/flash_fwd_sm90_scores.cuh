// The sm90 forward's score policies: what a key block's raw scores Q K^T go through on their
// way to probabilities, and what the probabilities go through after the exponentials. The
// kernel is instantiated once per policy (flash_fwd_sm90_launch.cuh picks one per call):
//   CausalWindowScores  the fast path: only the causal / sliding-window band and per-batch key
//                       lengths hide keys. Blocks outside the band are never loaded and blocks
//                       fully inside it are not masked element by element; the softmax takes
//                       its maximum on the raw scores (scale > 0), scales inside the
//                       exponential's FFMA, and may speculate on the running maximum.
//   GeneralScores       everything else: a boolean or additive mask, softcap, ALiBi (through
//                       general_score_log2, shared with the sm80 kernel) and dropout; every
//                       score becomes its base-2 logit first.
// A policy object lives for one tile and one thread (its two rows). Besides that state and the
// two hooks (to_probabilities, after_exp) it names the kernel shapes it allows: the general
// path's extra state makes ptxas spill in every bucket, and the choices below keep the spills
// down.
#pragma once

#include <cmath>

#include "cuda/common/flash_fwd_params.hpp"
#include "cuda/common/score_mods.cuh"
#include "cuda/common/tile_coords.cuh"
#include "cuda/sm90/flash_fwd_sm90_scheduler.cuh"
#include "cuda/sm90/flash_fwd_sm90_traits.cuh"

namespace tileattn::cuda {

struct CausalWindowScores {
  // The softmax may speculate on the running maximum (Sm90TileConfig::speculate_max).
  static constexpr bool kSpeculation = true;
  // A masked block whose second half no row of a warp sees is half a block for that warp
  // (Sm90TileConfig::half_masked_blocks).
  static constexpr bool kHalfMaskedBlocks = true;
  static constexpr bool kSpills = false;
  // The warpgroup index is shuffled from lane 0, so that the consumer's Q descriptors live in
  // uniform registers: a clear gain at D 256, and at D 64 it takes the step's eight R2UR moves
  // of the Q descriptors out of the loop.
  static constexpr bool kUniformWarpGroup = true;
  // The row maximum as a tree (depth log2 of the row's elements instead of one chain of
  // dependent FMNMX: the max is on the softmax's critical path).
  static constexpr bool kMaxTree = true;

  const Sm90TileWork& w;
  int row0, t;  // the thread's rows row0 and row0 + 8, and its first column 2 t in an n8 tile

  __device__ __forceinline__ CausalWindowScores(const FlashFwdParams&, const Sm90TileWork& work,
                                                int row0_, int t_)
      : w(work), row0(row0_), t(t_) {}

  // The exponent is x * scale - max on raw scores x.
  __device__ __forceinline__ static float scale(const FlashFwdParams& p) { return p.scale_log2; }

  // Block n_block's scores s -> probabilities (the online softmax). Where the block crosses a
  // window or length edge (the causal diagonal too) the hidden scores become -inf first; where
  // no row of the warp sees a key of the block's second half (the diagonal's upper rows,
  // K::kHalfMasked), that half is left as it is and the softmax takes the first half only.
  // j0: the key of the thread's first score, n_block * block_n + 2 t.
  // (A non-finite raw score is not turned into NaN here as in the sm80 kernel: one FFMA per
  // score costs this softmax 5-10% at D 64 and 128. NaN and +inf reach the sum on their own; a
  // -inf raw score weighs 0, see docs/semantics.md.)
  template <class K, bool kFirst, class Softmax>
  __device__ __forceinline__ void to_probabilities(const Sm90FwdParams& params, Softmax& softmax,
                                                   typename K::SFragment& s,
                                                   typename K::POperand& pa, int n_block, int j0,
                                                   float (&rescale)[2]) const {
    const int n0 = n_block * K::kBlockN;
    [[maybe_unused]] bool right_empty = false;  // no row of the warp sees the second half
    if (n0 < w.first_bottom || n0 + K::kBlockN > w.last_top) {  // a window / length edge
      if constexpr (K::kHalfMasked) {
        int first[2], last[2];  // each row's visible keys, relative to this thread's column
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          w.coords.visible(row0 + 8 * hh, first[hh], last[hh]);
          first[hh] -= n0 + 2 * t;
          last[hh] -= n0 + 2 * t;
        }
        right_empty = __all_sync(0xffffffffu, max(last[0], last[1]) <= K::kBlockN / 2 - 2 * t);
#pragma unroll
        for (int nt = 0; nt < K::kHalfTiles; ++nt) mask_tile(s, nt, first, last);
        if (!right_empty) {
#pragma unroll
          for (int nt = K::kHalfTiles; nt < K::kNTiles; ++nt) mask_tile(s, nt, first, last);
        }
      } else {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          int first, last;
          w.coords.visible(row0 + 8 * hh, first, last);
          first -= n0 + 2 * t;
          last -= n0 + 2 * t;
          mask_row_outside<0, K::kNTiles>(s, hh, first, last);
        }
      }
    }
    if constexpr (K::kHalfMasked) {
      if (right_empty)
        softmax.template update<K::kHalfTiles, kFirst>(params, params.base, *this, s, pa, j0,
                                                       rescale);
      else
        softmax.template update<K::kNTiles, kFirst>(params, params.base, *this, s, pa, j0, rescale);
    } else {
      softmax.template update<K::kNTiles, kFirst>(params, params.base, *this, s, pa, j0, rescale);
    }
  }

  template <class K>
  __device__ __forceinline__ void after_exp(const FlashFwdParams&, typename K::SFragment&, int,
                                            int) const {}

 private:
  // One n8 tile, both rows (the faster order for the half-block masks).
  template <int N>
  __device__ __forceinline__ static void mask_tile(float (&s)[N][4], int nt, const int (&first)[2],
                                                   const int (&last)[2]) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int j = nt * 8 + e;
        if (j < first[hh] || j >= last[hh]) s[nt][2 * hh + e] = -INFINITY;
      }
  }
};

struct GeneralScores {
  static constexpr bool kSpeculation = false;  // the scores are no longer raw at the softmax
  static constexpr bool kHalfMaskedBlocks = false;
  // ptxas spills in every bucket, so the epilogue re-reads its coordinates (Sm90FwdEpilogue).
  static constexpr bool kSpills = true;
  // The plain warpgroup index: shuffled (see CausalWindowScores) it raised the D 128 kernel's
  // spills from 252 to 360 bytes.
  static constexpr bool kUniformWarpGroup = false;
  // The row maximum as a chain: the tree raised the spills at D 128 and 256.
  static constexpr bool kMaxTree = false;

  GeneralScoreRow rows[2];  // the thread's rows row0 and row0 + 8
  int h, b, row0, t;

  __device__ __forceinline__ GeneralScores(const FlashFwdParams& p, const Sm90TileWork& w,
                                           int row0_, int t_)
      : h(w.coords.h), b(w.coords.b), row0(row0_), t(t_) {
    const float slope = alibi_slope(p, b, h);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      GeneralScoreRow& r = rows[hh];
      r.i = row0 + 8 * hh;
      r.slope = slope;
      r.mask_row = mask_row_offset(p, b, h, r.i);
      r.distance0 = r.i + w.coords.klen - w.coords.len_q;
      w.coords.visible(r.i, r.first, r.last);
    }
  }

  // The scores are base-2 logits already.
  __device__ __forceinline__ static float scale(const FlashFwdParams&) {
    return 1.0f;
  }

  // Block n_block's scores s -> base-2 logits (-inf where hidden) -> probabilities (the online
  // softmax). j0: the key of the thread's first score, n_block * block_n + 2 t.
  template <class K, bool kFirst, class Softmax>
  __device__ __forceinline__ void to_probabilities(const Sm90FwdParams& params, Softmax& softmax,
                                                   typename K::SFragment& s,
                                                   typename K::POperand& pa, int, int j0,
                                                   float (&rescale)[2]) const {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
#pragma unroll
      for (int nt = 0; nt < K::kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[nt][2 * hh + e];
          x = general_score_log2(params.base, rows[hh], j0 + nt * 8 + e, x);
        }
    softmax.template update<K::kNTiles, kFirst>(params, params.base, *this, s, pa, j0, rescale);
  }

  // Dropout of row hh's probabilities (the running sum has taken them undropped).
  template <class K>
  __device__ __forceinline__ void after_exp(const FlashFwdParams& p, typename K::SFragment& s,
                                            int hh, int j0) const {
    if (p.dropout_threshold != 0) {
#pragma unroll
      for (int nt = 0; nt < K::kNTiles; ++nt)
        apply_dropout_pair(p, b, h, row0 + 8 * hh, j0 + nt * 8, s[nt][2 * hh], s[nt][2 * hh + 1]);
    }
  }
};

}  // namespace tileattn::cuda
