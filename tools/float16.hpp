// Scalar conversions between f32 and the 16-bit storage types for the tool's host buffers
// (random inputs, .npy files, comparisons). Round to nearest even; a NaN stays a quiet NaN of the
// same sign. The library converts inside its kernels and exports no conversion, so the tool
// keeps its own (tests/cli checks them against the library's results).
#pragma once

#include <bit>
#include <cstdint>

#include "tileattn/tileattn.hpp"

namespace tileattn::tools {

inline float bf16_to_f32(std::uint16_t h) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

inline std::uint16_t f32_to_bf16(float f) noexcept {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);  // round the dropped 16 bits to nearest even
  return static_cast<std::uint16_t>(u >> 16);
}

inline float f16_to_f32(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0)
    return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  if (mantissa == 0) return std::bit_cast<float>(sign);
  std::uint32_t f32_exponent = 113u;  // a subnormal: normalise the mantissa
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --f32_exponent;
  }
  return std::bit_cast<float>(sign | (f32_exponent << 23) | ((mantissa & 0x3ffu) << 13));
}

inline std::uint16_t f32_to_f16(float f) noexcept {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);   // NaN
  if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // to inf
  if (magnitude < 0x38800000u) {
    // Subnormal or zero: adding 0.5 puts the f16 subnormal step (2^-24) at the last mantissa
    // bit, so the float addition does the rounding.
    const float sum = std::bit_cast<float>(magnitude) + 0.5f;
    return static_cast<std::uint16_t>(sign | (std::bit_cast<std::uint32_t>(sum) - 0x3f000000u));
  }
  // Rebias the exponent (127 -> 15) and round the dropped 13 bits to nearest even.
  const std::uint32_t rounded = magnitude + 0xc8000fffu + ((magnitude >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (rounded >> 13));
}

// Element `index` of a buffer of f32, f16 or bf16 storage, as f32.
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

}  // namespace tileattn::tools
