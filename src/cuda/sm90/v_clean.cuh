// The Hopper forward's share of "masked means absent" (docs/semantics.md, "Non-finite values").
// In a key block where some row of the tile cannot see some key (a causal or window edge, the
// end of key_lengths, a mask), a NaN or Inf in a V row would reach every row through P V: a
// probability of 0 times NaN is NaN. The producer warp cleans such a block's V tile once it has
// landed and before the consumers may read it: non-finite elements become 0, and the keys whose
// V row held one are recorded as bits. The consumers then make P NaN where a recorded key is
// visible (poison_flagged_keys), so that exactly the rows that see such a key become NaN.
// Blocks every row sees in full need neither step: there P V reaches only rows that see the key.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/common/poison.cuh"

namespace tileattn::cuda {

// Flag words per ring slot: one bit per key of a block of up to 128 keys.
inline constexpr int kVFlagWords = 4;

// Bit 15 of each 16-bit half of the result is set where that half of w holds a non-finite T: its
// exponent bits, all ones, plus one unit of the exponent carry into bit 15 (no carry crosses
// into the upper half, the sign bit having been masked off). Three integer instructions a word,
// where a __vcmpeq2 (emulated on sm_90) takes several.
template <typename T>
__device__ __forceinline__ std::uint32_t nonfinite_carry(std::uint32_t w) {
  constexpr bool kHalf = std::is_same_v<T, __half>;
  constexpr std::uint32_t kExponents = kHalf ? 0x7c007c00u : 0x7f807f80u;
  constexpr std::uint32_t kUnit = kHalf ? 0x04000400u : 0x00800080u;
  return (w & kExponents) + kUnit;
}

// The V tile of one ring slot: kColBlocks column blocks of (kRows, 64) elements, each row 128
// contiguous bytes (the 128-byte swizzle permutes 16-byte chunks within a row, which a whole-row
// scan does not see). Run by a full warp: lane l scans rows l, l + 32, ...; `flags` receives one
// bit per row whose elements held a non-finite value. The scan only reads (two chunks in flight:
// the producer warp runs on 24 registers); the rare rows with a non-finite element are rewritten
// in a second pass.
template <typename T, int kRows, int kColBlocks>
__device__ __forceinline__ void clean_v_tile(T* tile, std::uint32_t* flags, int lane) {
  static_assert(kRows % 32 == 0 && kRows / 32 <= kVFlagWords, "one flag word per 32 rows");
#pragma unroll 1
  for (int word = 0; word < kRows / 32; ++word) {
    const int row = word * 32 + lane;
    std::uint32_t carry = 0;
#pragma unroll 1
    for (int cb = 0; cb < kColBlocks; ++cb) {
      const uint4* chunks = reinterpret_cast<const uint4*>(tile + (cb * kRows + row) * 64);
#pragma unroll 2
      for (int chunk = 0; chunk < 8; ++chunk) {
        const uint4 v = chunks[chunk];
        carry |= nonfinite_carry<T>(v.x) | nonfinite_carry<T>(v.y) | nonfinite_carry<T>(v.z) |
                 nonfinite_carry<T>(v.w);
      }
    }
    const bool bad = (carry & 0x80008000u) != 0;
    const std::uint32_t bits = __ballot_sync(0xffffffffu, bad);
    if (bad) {
#pragma unroll 1
      for (int cb = 0; cb < kColBlocks; ++cb) {
        unsigned char* bytes = reinterpret_cast<unsigned char*>(tile + (cb * kRows + row) * 64);
#pragma unroll 1
        for (int chunk = 0; chunk < 8; ++chunk) clear_nonfinite_chunk<T>(bytes + 16 * chunk);
      }
    }
    if (lane == 0) flags[word] = bits;
  }
}

// The packed pair of NaNs that replaces a probability pair of the P V operand.
template <typename T>
__device__ __forceinline__ std::uint32_t nan_pair() {
  const std::uint16_t bits = std::is_same_v<T, __half> ? 0x7e00 : 0x7fc0;
  return static_cast<std::uint32_t>(bits) * 0x10001u;
}

}  // namespace tileattn::cuda
