// The kernels' share of docs/semantics.md, "Non-finite values". A key that a row cannot see
// must contribute nothing, yet its probability 0 times a NaN or Inf in V is NaN. So the K/V
// blocks where some row of the CTA cannot see some key (range edges, masks, memory behind
// key_lengths) are cleaned in shared memory before use: a key whose V row holds a non-finite
// element gets those elements zeroed and a NaN written into its K row. Its scores are then NaN
// exactly where the key is visible (a mask replaces them elsewhere), and a NaN score poisons
// its row through the softmax sum, as a non-finite score does anywhere (as_score_or_nan).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace tileattn::cuda {

// A score beyond f32's range or NaN becomes NaN, a finite one stays: x + 0 * x.
__device__ __forceinline__ float as_score_or_nan(float x) {
  return fmaf(x, 0.0f, x);
}

// 0xffff in each 16-bit half of w that holds a non-finite T (all exponent bits set).
template <typename T>
__device__ __forceinline__ std::uint32_t nonfinite_halves(std::uint32_t w) {
  constexpr std::uint32_t kExponents =
      std::is_same_v<T, __half> ? 0x7c007c00u : 0x7f807f80u;  // f16 : bf16
  return __vcmpeq2(w & kExponents, kExponents);
}

// Zeroes the non-finite elements of the 16-byte chunk at `chunk` (shared memory, 16-byte
// aligned); returns whether there were any.
template <typename T>
__device__ __forceinline__ bool clear_nonfinite_chunk(void* chunk) {
  uint4 v = *static_cast<const uint4*>(chunk);
  const std::uint32_t m0 = nonfinite_halves<T>(v.x), m1 = nonfinite_halves<T>(v.y);
  const std::uint32_t m2 = nonfinite_halves<T>(v.z), m3 = nonfinite_halves<T>(v.w);
  if ((m0 | m1 | m2 | m3) == 0) return false;
  v.x &= ~m0;
  v.y &= ~m1;
  v.z &= ~m2;
  v.w &= ~m3;
  *static_cast<uint4*>(chunk) = v;
  return true;
}

// The NaN a poisoned key's K row receives.
template <typename T>
__device__ __forceinline__ T nan_element() {
  if constexpr (std::is_same_v<T, __half>)
    return __ushort_as_half(0x7e00);
  else
    return __ushort_as_bfloat16(0x7fc0);
}

// Whether a row's output must be NaN: its softmax sum is NaN (a visible non-finite score), or
// one of its accumulated elements is not finite (a visible non-finite V). `acc_check` is the
// lane's fmaf(acc, 0, acc_check) over its elements of the row, summed over the row's lanes.
__device__ __forceinline__ bool row_poisoned(float sum, float acc_check) {
  return sum != sum || acc_check != acc_check;
}

}  // namespace tileattn::cuda
