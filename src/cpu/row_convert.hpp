// Whole-row conversions between the storage dtypes and f32 for the CPU drivers
// (flash_forward.cpp, flash_backward.cpp). Those are compiled for the baseline target only, so
// these inline functions are never merged with code built for a wider ISA.
#pragma once

#include <algorithm>
#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "common/float_convert.hpp"

namespace tileattn::detail {

// f16 <-> f32 for whole rows. With F16C (every ISA level from avx2 up) the hardware converts
// eight at a time; the portable level uses the scalar conversion.
#if defined(__x86_64__)
__attribute__((target("avx,f16c"))) inline void f16_to_f32_f16c(const std::uint16_t* src,
                                                                float* dst, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = _cvtsh_ss(src[i]);
}
__attribute__((target("avx,f16c"))) inline void f32_to_f16_f16c(const float* src,
                                                                std::uint16_t* dst,
                                                                std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) dst[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}
#endif

// Returns `count` contiguous elements of storage type `dtype` as f32: a pointer into the source
// for f32, else converted into `buffer`.
inline const float* row_as_f32(const void* base, DType dtype, std::int64_t offset,
                               std::int64_t count, float* buffer, bool f16c) {
  switch (dtype) {
    case DType::f16: {
      const auto* src = static_cast<const std::uint16_t*>(base) + offset;
#if defined(__x86_64__)
      if (f16c) {
        f16_to_f32_f16c(src, buffer, count);
        return buffer;
      }
#endif
      for (std::int64_t i = 0; i < count; ++i) buffer[i] = f16_to_f32(src[i]);
      return buffer;
    }
    case DType::bf16: {
      const auto* src = static_cast<const std::uint16_t*>(base) + offset;
      for (std::int64_t i = 0; i < count; ++i) buffer[i] = bf16_to_f32(src[i]);
      return buffer;
    }
    default: return static_cast<const float*>(base) + offset;
  }
}

// Whether `count` contiguous elements of storage type `dtype` are all finite, read from their
// bits (an all-ones exponent is Inf or NaN), so that no conversion is needed to decide.
inline bool row_is_finite(const void* base, DType dtype, std::int64_t offset, std::int64_t count) {
  std::uint32_t bad = 0;
  if (dtype == DType::f32) {
    const auto* src = static_cast<const std::uint32_t*>(base) + offset;
    for (std::int64_t i = 0; i < count; ++i) bad |= (src[i] & 0x7f800000u) == 0x7f800000u;
  } else {
    const std::uint16_t exponent = dtype == DType::f16 ? 0x7c00u : 0x7f80u;
    const auto* src = static_cast<const std::uint16_t*>(base) + offset;
    for (std::int64_t i = 0; i < count; ++i) bad |= (src[i] & exponent) == exponent;
  }
  return bad == 0;
}

// A row of zeros that stands in for a poisoned (non-finite) input row in the packed copies:
// its arithmetic stays finite, and the poisoned rows are set to NaN explicitly.
inline constexpr std::int64_t kZeroRowLength = 256;  // the largest head dim
alignas(64) inline constexpr float kZeroRowF32[kZeroRowLength] = {};
alignas(64) inline constexpr std::uint16_t kZeroRow16[kZeroRowLength] = {};

inline void store_row(void* base, DType dtype, std::int64_t offset, std::int64_t count,
                      const float* src, bool f16c) {
  switch (dtype) {
    case DType::f16: {
      auto* dst = static_cast<std::uint16_t*>(base) + offset;
#if defined(__x86_64__)
      if (f16c) {
        f32_to_f16_f16c(src, dst, count);
        break;
      }
#endif
      for (std::int64_t i = 0; i < count; ++i) dst[i] = f32_to_f16(src[i]);
      break;
    }
    case DType::bf16: {
      auto* dst = static_cast<std::uint16_t*>(base) + offset;
      for (std::int64_t i = 0; i < count; ++i) dst[i] = f32_to_bf16(src[i]);
      break;
    }
    default: std::copy_n(src, count, static_cast<float*>(base) + offset); break;
  }
}

}  // namespace tileattn::detail
