// Scalar conversions between f32 and the 16-bit storage types (round to nearest even).
// Used by the reference, the portable kernel path and the fuzz targets (the command-line tool,
// which sees only the public API, keeps its own: tools/float16.hpp); SIMD paths convert
// in-register.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

#include "tileattn/tileattn.hpp"

namespace tileattn::detail {

inline float bf16_to_f32(std::uint16_t h) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

inline std::uint16_t f32_to_bf16(float f) noexcept {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

inline float f16_to_f32(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: renormalise
    int shift = 0;
    std::uint32_t m = mant;
    while ((m & 0x400u) == 0) {
      m <<= 1;
      ++shift;
    }
    bits = sign | ((113u - static_cast<std::uint32_t>(shift)) << 23) | ((m & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

inline std::uint16_t f32_to_f16(float f) noexcept {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {  // result is subnormal or zero: round via float addition trick
    const float magic = std::bit_cast<float>(0x3f000000u);  // 0.5: aligns ulp to 2^-24
    const float r = std::bit_cast<float>(abs) + magic;
    return static_cast<std::uint16_t>(sign | (std::bit_cast<std::uint32_t>(r) - 0x3f000000u));
  }
  std::uint32_t m = abs + 0xc8000fffu + ((abs >> 13) & 1u);  // rebias exponent and round
  return static_cast<std::uint16_t>(sign | (m >> 13));
}

// Loads element `index` of a q/k/v/out style buffer of storage type `dtype` as f32.
inline float load_as_f32(const void* base, DType dtype, std::int64_t index) noexcept {
  switch (dtype) {
    case DType::f16: return f16_to_f32(static_cast<const std::uint16_t*>(base)[index]);
    case DType::bf16: return bf16_to_f32(static_cast<const std::uint16_t*>(base)[index]);
    default: return static_cast<const float*>(base)[index];
  }
}

inline void store_from_f32(void* base, DType dtype, std::int64_t index, float value) noexcept {
  switch (dtype) {
    case DType::f16: static_cast<std::uint16_t*>(base)[index] = f32_to_f16(value); break;
    case DType::bf16: static_cast<std::uint16_t*>(base)[index] = f32_to_bf16(value); break;
    default: static_cast<float*>(base)[index] = value; break;
  }
}

}  // namespace tileattn::detail
