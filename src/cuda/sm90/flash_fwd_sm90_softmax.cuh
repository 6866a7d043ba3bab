// The sm90 forward's online softmax, per consumer thread: two rows (row0 and row0 + 8 of its
// warp's 16), their running maxima and sums in base-2 units, and each key block's scores turned
// into probabilities, P (the P V wgmma's register operand).
//
// Lazy rescaling: the running max moves only when a block's max exceeds it by more than the
// threshold (8: probabilities stay below 2^8, exactly renormalised at the end), so most blocks
// leave O unscaled.
//
// Speculation (fast kernels, Sm90TileConfig::speculate_max): the exponentials against the
// running max without the block's max (no max tree, shuffles or rescale decision on the
// critical path). They are kept when every one is at most 2^threshold, which a thread's sum
// over its elements bounds; otherwise (rare after a row's first block) the warp redoes the block
// from the scores, moving the max eagerly. A tile's first block starts from a guessed running
// max, the thread's row's final running max in its previous tile (max_guess), instead of
// computing the block's max (the eager path, ~20% longer, on a tile's critical path where no
// P V overlaps it). The guess is checked as later blocks are: every probability at most
// 2^threshold; and, since it may also be too high, each row's sum at least kGuessFloor (bf16:
// its largest probability >= 2^-67, so nothing that the exponentials flush to 0 could weigh in
// f32; f16, with its 5-bit exponent: >= 2^-13, so no P, subnormal or not, rounds by more than
// the largest one's own rounding). A failed guess redoes the block eagerly.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <type_traits>

#include "cuda/common/elements.cuh"
#include "cuda/common/exp2_poly.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/sm90/flash_fwd_sm90_traits.cuh"

namespace tileattn::cuda {

// v[0] = max of v[0..N), by pairs at strides 1, 2, 4, ... (log2 N dependent steps).
template <int N, int kStride = 1>
__device__ __forceinline__ void max_tree(float (&v)[N]) {
  if constexpr (kStride < N) {
#pragma unroll
    for (int i = 0; i + kStride < N; i += 2 * kStride) v[i] = fmaxf(v[i], v[i + kStride]);
    max_tree<N, 2 * kStride>(v);
  }
}

// The online softmax of one tile, over the row state the consumer keeps for the tile: the
// running maxima and sums of the thread's two rows and, in speculating kernels, whether the warp
// may speculate (all three are referenced, not held: the consumer's tile loop owns them).
template <class K>
struct Sm90OnlineSoftmax {
  using T = typename K::Element;
  using Scores = typename K::ScorePolicy;
  static constexpr float kGuessFloor = std::is_same_v<T, __nv_bfloat16> ? 0x1p-60f : 0x1p-6f;

  const Sm90FwdParams& params;
  const float speculation_limit;  // 2^rescale_threshold
  float (&row_max)[2];            // base-2 units
  float (&row_sum)[2];
  // Speculating kernels: whether the warp may try a block against its running maxima (the lazy
  // rescaling is on and every row of the warp has a finite max), voted where the maxima change
  // (at the tile's start and after an eager block) instead of in every block.
  bool& speculate_ok;

  // A tile's start: row_max and row_sum hold -inf and 0; speculating kernels start from the
  // guess (max_guess).
  __device__ __forceinline__ Sm90OnlineSoftmax(const Sm90FwdParams& params_, float limit,
                                               const float (&max_guess)[2], float (&row_max_)[2],
                                               float (&row_sum_)[2], bool& speculate_ok_)
      : params(params_),
        speculation_limit(limit),
        row_max(row_max_),
        row_sum(row_sum_),
        speculate_ok(speculate_ok_) {
    if constexpr (K::kSpeculate) {
      row_max[0] = max_guess[0];
      row_max[1] = max_guess[1];
      update_speculate_ok();
    }
  }

  __device__ __forceinline__ void update_speculate_ok() {
    speculate_ok = params.rescale_threshold > 0.0f &&
                   __all_sync(0xffffffffu, row_max[0] != -INFINITY && row_max[1] != -INFINITY);
  }

  // The next tile's guess: the rows' final maxima where finite.
  __device__ __forceinline__ void keep_guess(float (&max_guess)[2]) const {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
      if (row_max[hh] != -INFINITY) max_guess[hh] = row_max[hh];
  }

  // The exponentials of row hh (0: row0, 1: row0 + 8) against `base` for the block's first
  // kActive n8 tiles (the others' probabilities are 0): in place of the scores, or (speculating
  // kernels) packed into pa as P, the wgmma operand (to_operand's layout in the main loop), so
  // that the scores stay. Returns this thread's sum of them.
  template <int kActive>
  __device__ __forceinline__ static float exp_row(typename K::SFragment& s,
                                                  typename K::POperand& pa, int hh, float scale,
                                                  float base) {
    float sum = 0.0f;
#pragma unroll
    for (int nt = 0; nt < K::kNTiles; ++nt) {
      float y[2] = {0.0f, 0.0f};
      if (nt < kActive) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float x = fmaf(s[nt][2 * hh + e], scale, -base);
          y[e] = nt % K::kPolyEvery == K::kPolyEvery - 1 ? exp2_poly(x) : exp2_approx(x);
          sum += y[e];
        }
      }
      if constexpr (K::kSpeculate) {
        pa[nt / 2][(nt % 2) * 2 + hh] = MmaType<T>::pack(y[0], y[1]);
      } else {
        s[nt][2 * hh] = y[0];
        s[nt][2 * hh + 1] = y[1];
      }
    }
    return sum;
  }

  // The online softmax of a block's scores (masked already by the score policy) over its first
  // kActive n8 tiles: s -> probabilities (see exp_row); rescale: the factors the running output
  // must be rescaled by. kFirst: the tile's first block (see max_guess). j0: the key of the
  // thread's first score in the block (the policy's after_exp takes it). p: params.base.
  template <int kActive, bool kFirst>
  __device__ __forceinline__ void update(const Sm90FwdParams& params, const FlashFwdParams& p,
                                         const Scores& scores, typename K::SFragment& s,
                                         typename K::POperand& pa, int j0, float (&rescale)[2]) {
    // Fast path: max on raw scores (scale > 0), p = 2^(x scale log2 e - max): one FFMA and
    // one MUFU per score. General path: scores are already base-2 logits.
    const float scale = Scores::scale(p);
    float threshold = params.rescale_threshold;
    if constexpr (K::kSpeculate && kActive == K::kNTiles) {  // (half blocks: eager, less code)
      if (speculate_ok) {
        float sums[2];
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) sums[hh] = exp_row<kActive>(s, pa, hh, scale, row_max[hh]);
        bool kept = sums[0] <= speculation_limit && sums[1] <= speculation_limit;
        if constexpr (kFirst) {  // the guessed max (see kGuessFloor)
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
    if constexpr (kFirst) {  // eager: the block's own max replaces a guess
      row_max[0] = -INFINITY;
      row_max[1] = -INFINITY;
    }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float tree[kActive];
#pragma unroll
      for (int nt = 0; nt < kActive; ++nt) tree[nt] = fmaxf(s[nt][2 * hh], s[nt][2 * hh + 1]);
      if constexpr (Scores::kMaxTree) {
        max_tree(tree);
      } else {
#pragma unroll
        for (int nt = 1; nt < kActive; ++nt) tree[0] = fmaxf(tree[0], tree[nt]);
      }
      float block_max = tree[0];
      block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 1));
      block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 2));
      const float scaled_max = block_max * scale;
      const float new_max = scaled_max > row_max[hh] + threshold ? scaled_max : row_max[hh];
      const float base = new_max == -INFINITY ? 0.0f : new_max;  // all masked so far
      rescale[hh] = new_max == row_max[hh] ? 1.0f : exp2_approx(row_max[hh] - base);
      row_max[hh] = new_max;
      row_sum[hh] = row_sum[hh] * rescale[hh] + exp_row<kActive>(s, pa, hh, scale, base);
      scores.template after_exp<K>(p, s, hh, j0);
    }
    if constexpr (K::kSpeculate) update_speculate_ok();
  }

  // The epilogue's row values: 1 / l and the logsumexp (natural log).
  __device__ __forceinline__ void row_values(float (&inv_sum)[2], float (&row_lse)[2]) const {
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
  }
};

}  // namespace tileattn::cuda
