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

#include "cuda/common/poison.cuh"

namespace tileattn::cuda {

// Flag words per ring slot: one bit per key of a block of up to 128 keys.
inline constexpr int kVFlagWords = 4;

// The V tile of one ring slot: kColBlocks column blocks of (kRows, 64) elements, each row 128
// contiguous bytes (the 128-byte swizzle permutes 16-byte chunks within a row, which a whole-row
// scan does not see). Run by a full warp: lane l scans rows l, l + 32, ...; `flags` receives one
// bit per row whose elements held a non-finite value.
template <typename T, int kRows, int kColBlocks>
__device__ __forceinline__ void clean_v_tile(T* tile, std::uint32_t* flags, int lane) {
  static_assert(kRows % 32 == 0 && kRows / 32 <= kVFlagWords, "one flag word per 32 rows");
#pragma unroll 1
  for (int word = 0; word < kRows / 32; ++word) {
    const int row = word * 32 + lane;
    bool bad = false;
#pragma unroll 1
    for (int cb = 0; cb < kColBlocks; ++cb) {
      unsigned char* bytes = reinterpret_cast<unsigned char*>(tile + (cb * kRows + row) * 64);
#pragma unroll 2
      for (int chunk = 0; chunk < 8; ++chunk) bad |= clear_nonfinite_chunk<T>(bytes + 16 * chunk);
    }
    const std::uint32_t bits = __ballot_sync(0xffffffffu, bad);
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
