// Transposes of row sets into the packed operand layouts of the CPU forward's drivers
// (flash_forward.cpp): compiled for the baseline target, SSE2 blocks where it has them.
#pragma once

#include <cstdint>

namespace tileattn::detail {

// dst[c * ld + r] = rows[r][c] for r < n, c < cols: 4 x 4 blocks through SSE registers where
// the baseline target has them (the packing of K and of the Q tile, which a scalar transpose
// would make the largest part of the driver's time).
void transpose_rows(const float* const* rows, std::int64_t n, std::int64_t cols, float* dst,
                    std::int64_t ld);

// dst[(w * ld + r) * 2 ..] = elements 2w, 2w + 1 of rows[r] (one 32-bit word: a pair) for
// r < n, w < words: 4 x 4 word blocks through SSE2 registers where the baseline target has
// them. Bit copies only (loadu / memcpy), so any row alignment and any 16-bit data will do.
void transpose_pairs(const std::uint16_t* const* rows, std::int64_t n, std::int64_t words,
                     std::uint16_t* dst, std::int64_t ld);

}  // namespace tileattn::detail
