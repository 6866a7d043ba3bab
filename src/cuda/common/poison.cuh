// The kernels' share of docs/semantics.md, "Non-finite values". A key that a row cannot see
// must contribute nothing, yet its probability 0 times a NaN or Inf in V is NaN. So the K/V
// blocks where some row of the CTA cannot see some key (range edges, masks, memory behind
// key_lengths) are cleaned in shared memory before use: a key whose V row holds a non-finite
// element gets those elements zeroed and a NaN written into its K row. Its scores are then NaN
// exactly where the key is visible (a mask replaces them elsewhere), and a NaN score poisons
// its row through the softmax sum, as a non-finite score does anywhere (as_score_or_nan).
//
// The sm80 backward (flash_bwd_kernel.cuh) finds the poisoned rows in lse: the forward's rules
// leave it NaN for every row that sees a non-finite q, k, v or score, and the prepare kernel
// (bwd_prepare_convert.cuh) makes it NaN for a row whose out or dout is not finite or whose lse
// is +inf, so P = 2^(x - lse) is NaN wherever such a row sees a key. In a step where some row
// cannot see some key it must make those positions add nothing although every GEMM operand can
// hold a NaN or Inf there: P and dS are set to 0 there by a select, and the non-finite elements
// of K, Q and dO are zeroed in shared memory (clear_nonfinite_tile for K, once per CTA;
// clear_own_nonfinite_chunks for Q and dO, or by their converting loader), since 0 times those is
// NaN in dQ = dS K, dK = dS^T Q and dV = P^T dO. (K keeps no NaN there, unlike the forward: it is
// an operand of dQ. V and dP need no cleaning: dP only reaches dS, and dS is selected.) Zeros
// that also reach steps where every row sees every key (K for the whole loop, Q and dO from the
// converting loader) change nothing there: a row that sees a non-finite element is poisoned, and
// its NaN lse makes its P and dS NaN whatever the operands hold.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace tileattn::cuda {

// A score beyond f32's range or NaN becomes NaN, a finite one stays: x + 0 * x.
__device__ __forceinline__ float as_score_or_nan(float x) { return fmaf(x, 0.0f, x); }

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

// Zeroes the non-finite elements of a shared-memory tile of kChunks 16-byte chunks (any
// swizzle: the chunks are taken in storage order), spread over the kThreads threads of the CTA.
template <typename T, int kChunks, int kThreads>
__device__ __forceinline__ void clear_nonfinite_tile(T* tile) {
  static_assert(kChunks % kThreads == 0, "whole rounds of the CTA's threads");
  T* const first = tile + threadIdx.x * 8;
#pragma unroll 1
  for (int round = 0; round < kChunks / kThreads; ++round)
    clear_nonfinite_chunk<T>(first + round * kThreads * 8);
}

// Zeroes the non-finite elements of the 16-byte chunks that this thread copied into `tile` with
// `lanes` (a TileCopyLanes), once its copies have completed (cp_async_wait): the CTA's next
// barrier publishes the zeros, so no barrier of its own is needed. (A CTA-wide pass with its own
// barrier in the backward's step loop made ptxas spill in the steps without it.)
template <typename T, typename Lanes>
__device__ __forceinline__ void clear_own_nonfinite_chunks(const Lanes& lanes, T* tile) {
#pragma unroll 1
  for (int r = 0; r < Lanes::kRounds; ++r)
    clear_nonfinite_chunk<T>(reinterpret_cast<unsigned char*>(tile) + lanes.round_offset(r));
}

// Whether a 16-bit element is not finite (all exponent bits set).
template <typename T>
__device__ __forceinline__ bool nonfinite_element(T v) {
  constexpr std::uint16_t kExponent = std::is_same_v<T, __half> ? 0x7c00 : 0x7f80;
  return (*reinterpret_cast<const std::uint16_t*>(&v) & kExponent) == kExponent;
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
