// Which query rows see which keys, from the backward kernels' side (a CTA owns keys and visits
// the query blocks that see them): the sm80 and sm90 backward kernels share these.
#pragma once

#include <climits>
#include <cstdint>

#include "cuda/common/flash_fwd_params.hpp"

namespace tileattn::cuda {

// The query rows [lo, hi] that see key j (by causal/window/key length; the inverse of
// TileCoords::visible), clamped to [0, len_q) (len_q: the batch entry's or varlen sequence's
// query count); empty (lo > hi) for a key past the key length.
struct KeyRowVisibility {
  int lo, hi;
  __device__ KeyRowVisibility(const FlashFwdParams& p, int len_q, int j, int klen,
                              std::int64_t diagonal) {
    std::int64_t first = 0, last = len_q - 1;
    if (p.window_right >= 0 && j - p.window_right - diagonal > first)
      first = j - p.window_right - diagonal;
    if (p.window_left >= 0 && j + p.window_left - diagonal < last)
      last = j + p.window_left - diagonal;
    if (j >= klen || first > last) first = INT_MAX, last = INT_MIN;
    lo = static_cast<int>(first);
    hi = static_cast<int>(last);
  }
  __device__ bool sees(int i) const { return lo <= i && i <= hi; }
};

// Which of a lane's query columns i0 + 8 nt + e (nt < kQTiles n8 tiles, e < 2: the lane's two
// columns of each) a key row sees: bit 2 nt + e of the word is set iff the column is in the row's
// range [lo, hi]. The columns increase with the bit index, so the set bits are one run, from the
// number of columns below lo to the number below hi + 1; a step then masks an element with one
// bit test instead of comparing its column with both bounds.
template <int kQTiles>
struct LaneColumnMask {
  static_assert(2 * kQTiles <= 32, "a lane's columns of one key row fit one word");
  int begin, end;  // [lo, hi + 1), or [0, 0) when empty: i0 - begin and i0 - end cannot overflow

  __device__ explicit LaneColumnMask(const KeyRowVisibility& rows)
      : begin(rows.lo <= rows.hi ? rows.lo : 0), end(rows.lo <= rows.hi ? rows.hi + 1 : 0) {}

  // The number of the lane's columns below query row i0 + x.
  static __device__ __forceinline__ unsigned columns_below(int x) {
    x = min(max(x, 0), 8 * kQTiles);
    return 2 * (x >> 3) + min(x & 7, 2);
  }
  // Bits n.. of a word (none for n >= 32).
  static __device__ __forceinline__ unsigned bits_from(unsigned n) {
    return __funnelshift_lc(0u, ~0u, n);
  }
  __device__ __forceinline__ unsigned bits(int i0) const {
    return bits_from(columns_below(begin - i0)) & ~bits_from(columns_below(end - i0));
  }
};

// The first key block (of kBlockN keys) that some row of query block m_block sees: key blocks
// m_block's rows see form one contiguous range, so in deterministic mode key block n is the
// (n - first)-th to add to that query block's dQ.
template <int kBlockM, int kBlockN>
__device__ int first_key_block_seen(const FlashFwdParams& p, int m_block, std::int64_t diagonal) {
  if (p.window_left < 0) return 0;
  const std::int64_t key = static_cast<std::int64_t>(m_block) * kBlockM - p.window_left + diagonal;
  return key <= 0 ? 0 : static_cast<int>(key / kBlockN);
}

// The query blocks [begin, end) of kBlockM rows that see any key of the kBlockN keys from n0 (a
// superset: elements are masked one by one): rows i < len_q with n0 - window_right <= i +
// diagonal <= last key + window_left; empty for a key block at or past the key length.
struct QueryBlockRange {
  int begin, end;
};
template <int kBlockM, int kBlockN>
__device__ QueryBlockRange query_blocks_seeing(const FlashFwdParams& p, int len_q, int n0, int klen,
                                               std::int64_t diagonal) {
  QueryBlockRange range{0, 0};
  if (n0 < klen) {
    std::int64_t first = 0, last = len_q - 1;
    const int last_key = min(n0 + kBlockN, klen) - 1;
    if (p.window_right >= 0) first = max(first, n0 - p.window_right - diagonal);
    if (p.window_left >= 0) last = min(last, last_key + p.window_left - diagonal);
    if (first <= last) {
      range.begin = static_cast<int>(first / kBlockM);
      range.end = static_cast<int>(last / kBlockM) + 1;
    }
  }
  return range;
}

}  // namespace tileattn::cuda
