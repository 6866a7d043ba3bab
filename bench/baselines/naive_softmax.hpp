// The softmax pass of the naive baseline, one row of scores at a time: keys outside
// [first, last) get probability 0. One build per instruction set.
#pragma once

#include <cstdint>

namespace tileattn::bench {

void softmax_row_avx512(float* row, std::int64_t len, std::int64_t first, std::int64_t last);
void softmax_row_avx2(float* row, std::int64_t len, std::int64_t first, std::int64_t last);
void softmax_row_generic(float* row, std::int64_t len, std::int64_t first, std::int64_t last);

}  // namespace tileattn::bench
