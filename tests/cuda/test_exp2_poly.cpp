// exp2_poly (src/cuda/common/exp2_poly.cuh), the sm90 forward's MUFU-free 2^x: its relative
// error over the range the online softmax feeds it, and +0 for masked (-inf) and underflowing
// scores. Host-only (the same float operations as on the device): runs without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "cuda/common/exp2_poly.cuh"

namespace tileattn::test {
namespace {

TEST(CudaExp2Poly, RelativeErrorBelowBound) {
  // Lazy rescaling keeps the arguments at or below 8 (log2 units); test up to 127.
  double worst = 0.0;
  float worst_x = 0.0f;
  for (int i = -126000; i <= 127000; ++i) {
    const float x = static_cast<float>(i) * 1e-3f;
    const double exact = std::exp2(static_cast<double>(x));
    const double rel = std::fabs(cuda::exp2_poly(x) / exact - 1.0);
    if (rel > worst) {
      worst = rel;
      worst_x = x;
    }
  }
  EXPECT_LT(worst, 7.6e-5) << "at x = " << worst_x;
  EXPECT_GT(worst, 1e-6);  // the cubic's own error shows: this tests the polynomial, not exp2
}

TEST(CudaExp2Poly, PowersOfTwoAtIntegers) {
  for (int n = -126; n <= 127; ++n) {
    const float y = cuda::exp2_poly(static_cast<float>(n));
    EXPECT_NEAR(y / std::ldexp(1.0f, n), 1.0f, 7.6e-5f) << "n = " << n;
  }
}

TEST(CudaExp2Poly, MaskedAndUnderflowingScoresGiveZero) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {-inf, -1e30f, -1000.0f, -200.0f, -127.0f, -126.6f}) {
    const float y = cuda::exp2_poly(x);
    EXPECT_EQ(y, 0.0f) << "x = " << x;
    EXPECT_FALSE(std::signbit(y)) << "x = " << x;
  }
  EXPECT_GT(cuda::exp2_poly(-126.4f), 0.0f);
}

}  // namespace
}  // namespace tileattn::test
