// The softmax pass of the naive baseline, included by naive_softmax_{avx512,avx2,generic}.cpp,
// each compiled with its own target flags (like the library's kernels) and picked at run time.
// Define TILEATTN_SOFTMAX_ROW to the function name before including.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "naive_softmax.hpp"

namespace tileattn::bench {
namespace {

// exp(x) for x <= 0 (Cephes expf: range reduction by ln 2 and a degree-5 polynomial, ~1 ulp),
// written so that GCC vectorises the loops that call it.
[[gnu::always_inline]] inline float exp_nonpositive(float x) {
  constexpr float log2e = 1.44269504088896341f;
  constexpr float ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;
  x = x < -87.0f ? -87.0f : x;  // keeps 2^n a normal float; exp(-87) ~ 1.6e-38 is 0 for softmax
  const float n = std::floor(x * log2e + 0.5f);
  const float r = x - n * ln2_hi - n * ln2_lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * std::bit_cast<float>((static_cast<std::int32_t>(n) + 127) << 23);
}

}  // namespace

void TILEATTN_SOFTMAX_ROW(float* row, std::int64_t len, std::int64_t first, std::int64_t last) {
  std::fill(row, row + first, 0.0f);
  std::fill(row + last, row + len, 0.0f);
  if (first >= last) return;  // fully masked: out = 0
  // Fixed-width lane arrays instead of reduction pragmas: GCC vectorises these reliably (but
  // not when the function also calls a libm function such as tanh: softcap is applied before).
  constexpr std::int64_t kLanes = 16;
  const std::int64_t n = last - first, body = n - n % kLanes;
  float* x = row + first;
  float lane_max[kLanes];
  std::fill(lane_max, lane_max + kLanes, -std::numeric_limits<float>::infinity());
  for (std::int64_t j = 0; j < body; j += kLanes)
    for (std::int64_t l = 0; l < kLanes; ++l) lane_max[l] = std::max(lane_max[l], x[j + l]);
  float row_max = *std::max_element(lane_max, lane_max + kLanes);
  for (std::int64_t j = body; j < n; ++j) row_max = std::max(row_max, x[j]);

  float lane_sum[kLanes] = {};
  for (std::int64_t j = 0; j < body; j += kLanes)
    for (std::int64_t l = 0; l < kLanes; ++l) {
      const float e = exp_nonpositive(x[j + l] - row_max);
      x[j + l] = e;
      lane_sum[l] += e;
    }
  float sum = 0.0f;
  for (std::int64_t l = 0; l < kLanes; ++l) sum += lane_sum[l];
  for (std::int64_t j = body; j < n; ++j) {
    x[j] = exp_nonpositive(x[j] - row_max);
    sum += x[j];
  }
  const float inv_sum = 1.0f / sum;
  for (std::int64_t j = 0; j < n; ++j) x[j] *= inv_sum;
}

}  // namespace tileattn::bench
