// The general score path shared by the sm80 and sm90 kernels (used when a mask, softcap or
// ALiBi is present): one raw score Q_i . K_j becomes its base-2 logit, or -inf where the key is
// not visible. Same order of operations as src/common/score_mods.hpp: scale, softcap, ALiBi bias,
// additive mask; a false boolean mask entry or a key outside [first, last) hides the key.
// Dropout (apply_dropout_pair) acts on the probabilities after the softmax.
#pragma once

#include <cstdint>

#include "common/philox.hpp"
#include "cuda/common/flash_fwd_params.hpp"
#include "cuda/common/poison.cuh"

namespace tileattn::cuda {

// Per-row constants of the general score path.
struct GeneralScoreRow {
  float slope;            // ALiBi slope of (b, h), 0 without ALiBi
  std::int64_t mask_row;  // mask offset of (b, h, i) in elements
  int i, first, last;     // query row and its visible keys [first, last)
  int distance0;          // i + klen - len_q: ALiBi distance = |distance0 - j|
};

__device__ __forceinline__ float alibi_slope(const FlashFwdParams& p, int b, int h) {
  return p.alibi_slopes != nullptr ? p.alibi_slopes[b * p.alibi_stride_b + h * p.alibi_stride_h]
                                   : 0.0f;
}

__device__ __forceinline__ std::int64_t mask_row_offset(const FlashFwdParams& p, int b, int h,
                                                        int i) {
  return b * p.mask_stride_b + h * p.mask_stride_h + static_cast<std::int64_t>(i) * p.mask_stride_q;
}

// x: the raw score of key column j in row r. softcap_grad receives d(capped score) / d(scaled
// score) = 1 - tanh^2 (1 without a softcap), the factor the backward pass needs.
__device__ __forceinline__ float general_score_log2(const FlashFwdParams& p,
                                                    const GeneralScoreRow& r, int j, float x,
                                                    float& softcap_grad) {
  softcap_grad = 1.0f;
  if (r.i >= p.len_q || j < r.first || j >= r.last) return -INFINITY;
  float mask_add = 0.0f;
  if (p.mask != nullptr) {
    const std::int64_t at = r.mask_row + j * p.mask_stride_k;
    if (p.mask_additive) {
      mask_add = static_cast<const float*>(p.mask)[at];
      if (mask_add == -INFINITY) return -INFINITY;  // masked, whatever the score
    } else if (static_cast<const std::uint8_t*>(p.mask)[at] == 0) {
      return -INFINITY;
    }
  }
  // A scaled score beyond f32's range (or NaN) poisons the row, softcap or not.
  float score = as_score_or_nan(x * p.scale);
  if (p.softcap > 0.0f) {
    const float capped = tanhf(score / p.softcap);
    score = p.softcap * capped;
    softcap_grad = 1.0f - capped * capped;
  }
  const int distance = r.distance0 - j;
  score -= r.slope * static_cast<float>(distance < 0 ? -distance : distance);
  return (score + mask_add) * kLog2e;
}

__device__ __forceinline__ float general_score_log2(const FlashFwdParams& p,
                                                    const GeneralScoreRow& r, int j, float x) {
  float unused;
  return general_score_log2(p, r, j, x, unused);
}

__device__ __forceinline__ detail::DropoutParams dropout_params(const FlashFwdParams& p) {
  detail::DropoutParams d;
  d.seed = p.dropout_seed;
  d.offset = p.dropout_offset;
  d.threshold = p.dropout_threshold;
  d.keep_scale = p.dropout_keep_scale;
  d.heads_q = p.heads_q;
  return d;
}

// Whether dropout keeps element (b, h, i, j) (one Philox call decides four keys; one is used).
__device__ __forceinline__ bool dropout_keeps(const FlashFwdParams& p, int b, int h, int i, int j) {
  return detail::dropout_keeps(dropout_params(p), b, h, i, j);
}

// Dropout of one lane's probabilities in an m16n8 C fragment row: keys j0 and j0 + 1 (j0 even,
// so both lie in the same group of four keys that one Philox call decides). Kept values are
// scaled by keep_scale, dropped ones become 0; the running sum has already taken them undropped.
__device__ __forceinline__ void apply_dropout_pair(const FlashFwdParams& p, int b, int h, int i,
                                                   int j0, float& x0, float& x1) {
  const detail::DropoutParams d = dropout_params(p);
  const detail::Philox4x32 words = detail::dropout_words(d, b, h, i, j0 >> 2);
  const int n = j0 & 3;  // 0 or 2
  x0 = words.v[n] >= d.threshold ? x0 * d.keep_scale : 0.0f;
  x1 = words.v[n + 1] >= d.threshold ? x1 * d.keep_scale : 0.0f;
}

}  // namespace tileattn::cuda
