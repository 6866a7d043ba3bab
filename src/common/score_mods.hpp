// Element-wise score modifications shared by the reference and the scalar kernel paths, in the
// order fixed by docs/semantics.md: scale, softcap, ALiBi, additive mask, then -inf for every
// masked position. SIMD kernels implement the same steps and are tested against these.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "common/params.hpp"

namespace tileattn::detail {

// Boolean masks: true = attend. Returns false when the (b, h, i, j) element masks the score.
inline bool bool_mask_allows(const AttnParams& p, std::int64_t b, std::int64_t h, std::int64_t i,
                             std::int64_t j) noexcept {
  const auto* m = static_cast<const std::uint8_t*>(p.mask);
  return m[b * p.mask_stride_b + h * p.mask_stride_h + i * p.mask_stride_q + j * p.mask_stride_k] !=
         0;
}

inline float additive_mask(const AttnParams& p, std::int64_t b, std::int64_t h, std::int64_t i,
                           std::int64_t j) noexcept {
  const auto* m = static_cast<const float*>(p.mask);
  return m[b * p.mask_stride_b + h * p.mask_stride_h + i * p.mask_stride_q + j * p.mask_stride_k];
}

// Whether key j takes part in row i's softmax at all: inside the causal/window band and the
// valid key length, allowed by a boolean mask, and not -inf in an additive mask. A key that is
// not visible contributes nothing, whatever its K and V hold (docs/semantics.md).
inline bool key_visible(const AttnParams& p, std::int64_t b, std::int64_t h, std::int64_t i,
                        std::int64_t j) noexcept {
  const KeyRange range = visible_keys(p, b, i);
  if (j < range.first || j >= range.last) return false;
  if (p.mask == nullptr) return true;
  if (p.mask_dtype == DType::boolean) return bool_mask_allows(p, b, h, i, j);
  return additive_mask(p, b, h, i, j) != -std::numeric_limits<float>::infinity();
}

// Applies every modification to a raw dot product q_i . k_j of a visible key (key_visible).
// Real is double (reference) or float.
template <typename Real>
Real modified_score(const AttnParams& p, std::int64_t b, std::int64_t h, std::int64_t i,
                    std::int64_t j, Real dot) noexcept {
  Real s = static_cast<Real>(p.scale) * dot;
  if (p.softcap > 0.0f) {
    const Real c = static_cast<Real>(p.softcap);
    s = c * std::tanh(s / c);
  }
  if (p.alibi_slopes != nullptr) {
    const std::int64_t distance = i + p.key_length(b) - p.len_q - j;
    s -= static_cast<Real>(p.alibi_slope(b, h)) *
         static_cast<Real>(distance < 0 ? -distance : distance);
  }
  if (p.mask != nullptr && p.mask_dtype == DType::f32)
    s += static_cast<Real>(additive_mask(p, b, h, i, j));
  return s;
}

}  // namespace tileattn::detail
