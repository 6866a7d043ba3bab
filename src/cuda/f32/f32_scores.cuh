// The score pipeline of the f32 kernels, in natural units, with the non-finite rules of
// docs/semantics.md ("Non-finite values"): which keys a row sees, the modified score of a seen
// key (scale, softcap, ALiBi, additive mask; the same steps as src/common/score_mods.hpp), and
// whether that score poisons the row (a scaled dot product beyond f32's range either way, or a
// modified score that is NaN or +inf). A score below -FLT_MAX is -inf and weighs 0.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "common/philox.hpp"
#include "cuda/common/flash_fwd_params.hpp"
#include "cuda/common/score_mods.cuh"
#include "cuda/common/tile_coords.cuh"

namespace tileattn::cuda::f32 {

// One query row's constants.
struct ScoreRow {
  int i;                  // query row
  int first, last;        // keys [first, last) inside the causal / window band and key length
  std::int64_t mask_row;  // mask offset of (b, h, i), elements
  float slope;            // ALiBi slope of (b, h), 0 without ALiBi
  int distance0;          // i + klen - len_q: ALiBi distance = |distance0 - j|
};

// The row's constants; a row past its sequence's length sees nothing.
__device__ __forceinline__ ScoreRow score_row(const FlashFwdParams& p, const TileCoords& t, int i) {
  ScoreRow r;
  r.i = i;
  if (i < t.len_q) {
    t.visible(i, r.first, r.last);
  } else {
    r.first = r.last = 0;
  }
  r.mask_row = p.mask != nullptr ? mask_row_offset(p, t.b, t.h, i) : 0;
  r.slope = alibi_slope(p, t.b, t.h);
  r.distance0 = i + t.klen - t.len_q;
  return r;
}

// Whether row r sees key j: inside its band, allowed by a boolean mask, not -inf in an
// additive one.
__device__ __forceinline__ bool key_visible(const FlashFwdParams& p, const ScoreRow& r, int j) {
  if (j < r.first || j >= r.last) return false;
  if (p.mask == nullptr) return true;
  const std::int64_t at = r.mask_row + j * p.mask_stride_k;
  if (p.mask_additive) return static_cast<const float*>(p.mask)[at] != -INFINITY;
  return static_cast<const std::uint8_t*>(p.mask)[at] != 0;
}

// The modified score of a key row r sees, from its raw dot product. Sets `poison` when the score
// poisons the row; `dcap` receives d(capped) / d(scaled) = 1 - tanh^2 (1 without a softcap).
__device__ __forceinline__ float modified_score(const FlashFwdParams& p, const ScoreRow& r, int j,
                                                float dot, bool& poison, float& dcap) {
  float s = dot * p.scale;
  dcap = 1.0f;
  if (!(fabsf(dot) <= FLT_MAX) || !(fabsf(s) <= FLT_MAX)) {
    poison = true;
    return -INFINITY;
  }
  if (p.softcap > 0.0f) {
    const float t = tanhf(s / p.softcap);
    s = p.softcap * t;
    dcap = 1.0f - t * t;
  }
  if (p.alibi_slopes != nullptr) {
    const int distance = r.distance0 - j;
    s -= r.slope * static_cast<float>(distance < 0 ? -distance : distance);
  }
  if (p.mask != nullptr && p.mask_additive)
    s += static_cast<const float*>(p.mask)[r.mask_row + j * p.mask_stride_k];
  if (isnan(s) || s == INFINITY) {
    poison = true;
    return -INFINITY;
  }
  return s;
}

// The dropout keep factor of W adjacent keys j0 .. j0 + W - 1 of row i (W = 1, 2 or 4, j0 a
// multiple of W, so they share one Philox call): keep_scale or 0 each; 1 without dropout.
template <int W>
__device__ __forceinline__ void dropout_factors(const FlashFwdParams& p, int b, int h, int i,
                                                int j0, float* factor) {
  if (p.dropout_threshold == 0) {
#pragma unroll
    for (int e = 0; e < W; ++e) factor[e] = 1.0f;
    return;
  }
  const detail::Philox4x32 words = detail::dropout_words(dropout_params(p), b, h, i, j0 >> 2);
#pragma unroll
  for (int e = 0; e < W; ++e)
    factor[e] = words.v[(j0 + e) & 3] >= p.dropout_threshold ? p.dropout_keep_scale : 0.0f;
}

}  // namespace tileattn::cuda::f32
