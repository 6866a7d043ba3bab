// The vector exp2 of the CPU kernels (softmax probabilities, rescale factors, softcap) against
// std::exp2 in double, for every instruction set this CPU runs: relative error over a dense
// sweep of [-126, 0], and the exact values the online softmax relies on (1 at 0, 0 at -inf).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace tileattn::test {
void exp2_probe_avx512(const float* in, float* out, std::int64_t n);
void exp2_probe_avx2(const float* in, float* out, std::int64_t n);
void exp2_probe_portable(const float* in, float* out, std::int64_t n);

namespace {

using Probe = void (*)(const float*, float*, std::int64_t);

struct Level {
  std::string name;
  Probe probe;
  bool supported;
};

std::vector<Level> levels() {
  return {
      {"avx512", exp2_probe_avx512,
       __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq")},
      {"avx2", exp2_probe_avx2, __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")},
      {"portable", exp2_probe_portable, true}};
}

std::vector<float> run(Probe probe, std::vector<float> in) {
  in.resize((in.size() + 15) / 16 * 16, 0.0f);
  std::vector<float> out(in.size(), -1.0f);  // poisoned
  probe(in.data(), out.data(), static_cast<std::int64_t>(in.size()));
  return out;
}

TEST(CpuExp2, RelativeErrorOnTheSoftmaxRange) {
  // Every 1/4096 of [-126, 0] plus an odd offset, so that multiples of 1/16 and points between
  // them are both hit.
  std::vector<float> in;
  for (double x = 0.0; x >= -126.0; x -= 1.0 / 4096.0) in.push_back(static_cast<float>(x - 3e-5));
  for (const Level& level : levels()) {
    if (!level.supported) continue;
    const std::vector<float> out = run(level.probe, in);
    double worst = 0.0, at = 0.0;
    for (std::size_t i = 0; i < in.size(); ++i) {
      if (in[i] < -126.0f) continue;
      const double exact = std::exp2(static_cast<double>(in[i]));
      const double rel = std::abs(out[i] - exact) / exact;
      if (rel > worst) worst = rel, at = in[i];
    }
    EXPECT_LE(worst, 2.5e-7) << level.name << ": worst at x = " << at;
  }
}

TEST(CpuExp2, ExactValuesTheSoftmaxReliesOn) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const Level& level : levels()) {
    if (!level.supported) continue;
    const std::vector<float> out = run(level.probe, {0.0f, -0.0f, -inf, -1.0f, -2.0f, -10.0f});
    EXPECT_EQ(out[0], 1.0f) << level.name;  // a row whose maximum stays: rescale factor 1
    EXPECT_EQ(out[1], 1.0f) << level.name;
    EXPECT_EQ(out[2], 0.0f) << level.name;  // masked scores
    EXPECT_EQ(out[3], 0.5f) << level.name;
    EXPECT_EQ(out[4], 0.25f) << level.name;
    EXPECT_EQ(out[5], 1.0f / 1024.0f) << level.name;
  }
}

TEST(CpuExp2, Avx512GivesZeroBelowTheNormalRangeAndKeepsNan) {
  const Level avx512 = levels()[0];
  if (!avx512.supported) GTEST_SKIP() << "no AVX-512 on this CPU";
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> out =
      run(avx512.probe, {-126.5f, -140.0f, -1e30f, -inf, std::numeric_limits<float>::quiet_NaN()});
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], 0.0f) << "input " << i;  // never subnormal
  EXPECT_TRUE(std::isnan(out[4]));
}

}  // namespace
}  // namespace tileattn::test
