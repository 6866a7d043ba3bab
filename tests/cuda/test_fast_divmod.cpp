// FastDivmod: host arithmetic, no GPU needed (the device runs the same formula through
// __umulhi); checked against / and % for every divisor the decode kernel meets and beyond.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "cuda/common/fast_divmod.hpp"

namespace {

using tileattn::cuda::FastDivmod;

TEST(FastDivmod, MatchesDivisionForSmallDivisorsAndEveryEdge) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> any(0, INT32_MAX);
  for (int d = 1; d <= 4096; ++d) {
    const FastDivmod f(d);
    const int edges[] = {0,
                         1,
                         d - 1,
                         d,
                         d + 1,
                         2 * d - 1,
                         2 * d,
                         INT32_MAX - 1,
                         INT32_MAX,
                         INT32_MAX - INT32_MAX % d,
                         INT32_MAX - INT32_MAX % d - 1};
    for (const int n : edges) {
      if (n < 0) continue;
      ASSERT_EQ(f.div(n), n / d) << n << " / " << d;
      ASSERT_EQ(f.mod(n), n % d) << n << " % " << d;
    }
    for (int k = 0; k < 200; ++k) {
      const int n = any(rng);
      ASSERT_EQ(f.div(n), n / d) << n << " / " << d;
      ASSERT_EQ(f.mod(n), n % d) << n << " % " << d;
    }
  }
}

TEST(FastDivmod, MatchesDivisionForLargeDivisors) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> any(0, INT32_MAX), divisor(4097, INT32_MAX);
  for (int t = 0; t < 20000; ++t) {
    const int d = divisor(rng), n = any(rng);
    const FastDivmod f(d);
    ASSERT_EQ(f.div(n), n / d) << n << " / " << d;
    ASSERT_EQ(f.mod(n), n % d) << n << " % " << d;
  }
}

}  // namespace
