// The rotary embedding of one head vector on the host: f32 arithmetic, the table's values read
// as f32 (shared by apply_rotary, the KV-cache append and the reference, so that the reference
// sees exactly the rounded keys the cache holds).
#pragma once

#include <cstdint>

#include "common/float_convert.hpp"
#include "common/kvcache_params.hpp"

namespace tileattn::detail {

// Rotates x[0, t.dim) of an f32 row in place for position `pos` (< t.positions).
inline void rotate_f32(float* x, const RotaryTable& t, std::int64_t pos) noexcept {
  const std::int64_t half = t.dim / 2;
  for (std::int64_t i = 0; i < half; ++i) {
    const float c = load_as_f32(t.cos, t.dtype, pos * t.cos_stride + i);
    const float s = load_as_f32(t.sin, t.dtype, pos * t.sin_stride + i);
    const std::int64_t ia = t.interleaved ? 2 * i : i;
    const std::int64_t ib = t.interleaved ? 2 * i + 1 : i + half;
    const float a = x[ia], b = x[ib];
    x[ia] = a * c - b * s;
    x[ib] = a * s + b * c;
  }
}

// Copies `n` elements of storage `dtype` from src to dst, rotating them for `pos` on the way
// when t is present (src and dst may be the same row).
inline void copy_rotated(const void* src, void* dst, DType dtype, std::int64_t n,
                         const RotaryTable& t, std::int64_t pos, float* scratch) noexcept {
  for (std::int64_t i = 0; i < n; ++i) scratch[i] = load_as_f32(src, dtype, i);
  if (t.present()) rotate_f32(scratch, t, pos);
  for (std::int64_t i = 0; i < n; ++i) store_from_f32(dst, dtype, i, scratch[i]);
}

}  // namespace tileattn::detail
