// The general score path shared by the sm80 and sm90 kernels (used when a mask, softcap or
// ALiBi is present): one raw score Q_i . K_j becomes its base-2 logit, or -inf where the key is
// not visible. Same order of operations as src/api/score_mods.hpp: scale, softcap, ALiBi bias,
// additive mask; a false boolean mask entry or a key outside [first, last) hides the key.
#pragma once

#include <cstdint>

#include "cuda/sm80/flash_fwd_params.hpp"

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

// x: the raw score of key column j in row r.
__device__ __forceinline__ float general_score_log2(const FlashFwdParams& p,
                                                    const GeneralScoreRow& r, int j, float x) {
  if (r.i >= p.len_q || j < r.first || j >= r.last) return -INFINITY;
  float mask_add = 0.0f;
  if (p.mask != nullptr) {
    const std::int64_t at = r.mask_row + j * p.mask_stride_k;
    if (p.mask_additive)
      mask_add = static_cast<const float*>(p.mask)[at];
    else if (static_cast<const std::uint8_t*>(p.mask)[at] == 0)
      return -INFINITY;
  }
  float score = x * p.scale;
  if (p.softcap > 0.0f) score = p.softcap * tanhf(score / p.softcap);
  const int distance = r.distance0 - j;
  score -= r.slope * static_cast<float>(distance < 0 ? -distance : distance);
  return (score + mask_add) * kLog2e;
}

}  // namespace tileattn::cuda
