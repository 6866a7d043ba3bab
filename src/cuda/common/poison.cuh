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

// 0xffff in each 16-bit half of a 16-byte chunk that holds a non-finite T.
template <typename T>
__device__ __forceinline__ uint4 nonfinite_chunk_halves(uint4 v) {
  return make_uint4(nonfinite_halves<T>(v.x), nonfinite_halves<T>(v.y), nonfinite_halves<T>(v.z),
                    nonfinite_halves<T>(v.w));
}

__device__ __forceinline__ bool any_bits(uint4 m) {
  return (m.x | m.y | m.z | m.w) != 0;
}

// Zeroes the non-finite elements of the 16-byte chunk at `chunk` (shared memory, 16-byte
// aligned); returns whether there were any.
template <typename T>
__device__ __forceinline__ bool clear_nonfinite_chunk(void* chunk) {
  uint4 v = *static_cast<const uint4*>(chunk);
  const uint4 m = nonfinite_chunk_halves<T>(v);
  if (!any_bits(m)) return false;
  v.x &= ~m.x;
  v.y &= ~m.y;
  v.z &= ~m.z;
  v.w &= ~m.w;
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

// The backward's share (docs/semantics.md, "Backward"). A key whose K or V row holds a
// non-finite element must reach nothing where a row cannot see it; but there its probability 0
// meets its V in dP = dO V^T (0 * NaN) and its dS 0 meets its K in dQ = dS K. So each CTA zeroes
// such keys' K and V rows in shared memory once, before its first step. A row that sees such a
// key is poisoned by its lse, which the forward made NaN (the prepare keeps it NaN), so its
// probabilities and gradients are NaN where it sees a key.
//
// One warp checks rows r0 .. r0 + n - 1 (n <= 32) of the K and V tiles, 16 bytes per lane at a
// time (`chunk_at(tile, r, c)`: chunk c, in storage order, of row r), and zeroes both tiles'
// rows that hold a non-finite element. Returns, in every lane, bit r - r0 for each such row.
template <typename T, int kDim, typename ChunkAt>
__device__ __forceinline__ std::uint32_t clear_nonfinite_keys(T* k, T* v, int r0, int n,
                                                              ChunkAt chunk_at) {
  constexpr int kRowChunks = kDim / 8;  // per tile
  constexpr int kLanesPerRow = 2 * kRowChunks < 32 ? 2 * kRowChunks : 32;
  constexpr int kRowsPerPass = 32 / kLanesPerRow;
  constexpr int kChunksPerLane = 2 * kRowChunks / kLanesPerRow;
  constexpr std::uint32_t kRowLanes = kLanesPerRow == 32 ? 0xffffffffu : (1u << kLanesPerRow) - 1u;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int sub = lane / kLanesPerRow, first = lane % kLanesPerRow;
  std::uint32_t rows = 0;
  for (int pass = 0; pass < n; pass += kRowsPerPass) {
    const int r = r0 + pass + sub;
    const bool in = pass + sub < n;
    uint4* chunks[kChunksPerLane];
    bool bad = false;
#pragma unroll
    for (int i = 0; i < kChunksPerLane; ++i) {
      const int c = first + i * kLanesPerRow;  // K's chunks, then V's
      chunks[i] = reinterpret_cast<uint4*>(chunk_at(c < kRowChunks ? k : v, r, c % kRowChunks));
      if (in) bad |= any_bits(nonfinite_chunk_halves<T>(*chunks[i]));
    }
    const std::uint32_t votes = __ballot_sync(0xffffffffu, bad);
    if (votes == 0) continue;
    if (in && (votes >> (sub * kLanesPerRow) & kRowLanes) != 0) {
#pragma unroll
      for (int i = 0; i < kChunksPerLane; ++i) *chunks[i] = make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int s = 0; s < kRowsPerPass; ++s)
      if ((votes >> (s * kLanesPerRow) & kRowLanes) != 0) rows |= 1u << (pass + s);
  }
  return rows;
}

}  // namespace tileattn::cuda
