// src/common/float_convert.hpp, exhaustively: every f16 and bf16 bit pattern to f32, and every
// f32 bit pattern to f16 (against the F16C hardware conversion) and to bf16 (against an
// independent bit-level round-to-nearest-even, and the AVX512-BF16 instruction where present).
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/float_convert.hpp"
#include "test_support.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tileattn::test {
namespace {

using detail::bf16_to_f32;
using detail::f16_to_f32;
using detail::f32_to_bf16;
using detail::f32_to_f16;

bool f16_is_nan(std::uint16_t h) {
  return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
}
bool bf16_is_nan(std::uint16_t h) {
  return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0;
}

#if defined(__x86_64__)
bool has_f16c() {  // the avx2 level of the library's detection includes F16C and OS AVX state
  return static_cast<std::uint8_t>(build_info().best_cpu_isa) <=
         static_cast<std::uint8_t>(CpuIsa::avx2);
}
bool has_avx512_bf16() {
  return static_cast<std::uint8_t>(build_info().best_cpu_isa) <=
         static_cast<std::uint8_t>(CpuIsa::avx512_bf16);
}

__attribute__((target("f16c"))) float hw_f16_to_f32(std::uint16_t h) {
  return _cvtsh_ss(h);
}
#if defined(__clang__)  // clang's _cvtss_sh macro uses a compound literal
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wc99-extensions"
#endif
__attribute__((target("f16c"))) std::uint16_t hw_f32_to_f16(float f) {
  return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
#if defined(__clang__)
#pragma clang diagnostic pop
#endif
// n a multiple of 8.
__attribute__((target("avx,f16c"))) void hw_f32_to_f16(const float* in, std::uint16_t* out,
                                                       std::size_t n) {
  for (std::size_t i = 0; i < n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
}
// n a multiple of 16. The instruction treats denormal inputs as zero.
__attribute__((target("avx512f,avx512bf16"))) void hw_f32_to_bf16(const float* in,
                                                                  std::uint16_t* out,
                                                                  std::size_t n) {
  for (std::size_t i = 0; i < n; i += 16) {
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(in + i));
    std::memcpy(out + i, &h, sizeof(h));
  }
}
#endif

// Independent decodings by arithmetic, not bit manipulation.
float f16_by_arithmetic(std::uint16_t h) {
  const int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  const float sign = (h & 0x8000u) ? -1.0f : 1.0f;
  if (exp == 0x1f) return mant ? std::nanf("") : sign * INFINITY;
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -24);
  return sign * std::ldexp(static_cast<float>(1024 + mant), exp - 25);
}

float bf16_by_arithmetic(std::uint16_t h) {
  const int exp = (h >> 7) & 0xff, mant = h & 0x7f;
  const float sign = (h & 0x8000u) ? -1.0f : 1.0f;
  if (exp == 0xff) return mant ? std::nanf("") : sign * INFINITY;
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -133);
  return sign * std::ldexp(static_cast<float>(128 + mant), exp - 134);
}

// Round to nearest even on the bit pattern: keep the upper 16 bits, round up when the dropped
// half is above the midpoint, or at it with an odd kept part. Not for NaN inputs.
std::uint16_t bf16_rne_bits(std::uint32_t u) {
  std::uint32_t kept = u >> 16;
  const std::uint32_t dropped = u & 0xffffu;
  if (dropped > 0x8000u || (dropped == 0x8000u && (kept & 1u))) ++kept;
  return static_cast<std::uint16_t>(kept);
}

bool same_float(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) ||
         std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

TEST(FloatConvert, F16ToF32EveryPattern) {
  const bool hw = [] {
#if defined(__x86_64__)
    return has_f16c();
#else
    return false;
#endif
  }();
  int failures = 0;
  for (std::uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    const float got = f16_to_f32(h);
    bool ok = same_float(got, f16_by_arithmetic(h)) &&
              std::signbit(got) == static_cast<bool>(h & 0x8000u);
#if defined(__x86_64__)
    if (hw) ok = ok && same_float(got, hw_f16_to_f32(h));
#endif
    if (!f16_is_nan(h)) ok = ok && f32_to_f16(got) == h;  // exact round trip
    if (!ok && failures++ < 10)
      ADD_FAILURE() << "f16 0x" << std::hex << bits << " -> " << got << " (0x"
                    << std::bit_cast<std::uint32_t>(got) << ")";
  }
  EXPECT_EQ(failures, 0);
  if (!hw) std::cout << "[ note ] no F16C: checked against the arithmetic decoding only\n";
}

TEST(FloatConvert, Bf16ToF32EveryPattern) {
  int failures = 0;
  for (std::uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    const float got = bf16_to_f32(h);
    bool ok = same_float(got, bf16_by_arithmetic(h)) &&
              std::signbit(got) == static_cast<bool>(h & 0x8000u);
    if (!bf16_is_nan(h)) ok = ok && f32_to_bf16(got) == h;
    if (!ok && failures++ < 10) ADD_FAILURE() << "bf16 0x" << std::hex << bits << " -> " << got;
  }
  EXPECT_EQ(failures, 0);
}

TEST(FloatConvert, KnownValues) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00u);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000u);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bffu);               // largest finite
  EXPECT_EQ(f32_to_f16(65519.99f), 0x7bffu);              // below the rounding midpoint
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00u);               // midpoint rounds to even: inf
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001u);  // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000u);  // half of it: ties to even (0)
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -24)), 0x0002u);  // 1.5 ulp: ties to even (2)
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000u);
  EXPECT_EQ(f32_to_f16(INFINITY), 0x7c00u);
  EXPECT_TRUE(f16_is_nan(f32_to_f16(std::nanf(""))));
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80u);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80u);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82u);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x7f7fffffu)), 0x7f80u);  // max float: inf
  EXPECT_EQ(f32_to_bf16(-INFINITY), 0xff80u);
  EXPECT_TRUE(bf16_is_nan(f32_to_bf16(std::nanf(""))));
  EXPECT_TRUE(bf16_is_nan(f32_to_bf16(std::bit_cast<float>(0x7f800001u))));  // NaN stays NaN
  EXPECT_TRUE(bf16_is_nan(f32_to_bf16(std::bit_cast<float>(0xffffffffu))));
}

// The f32 sweeps, split into shards that run in parallel. TILEATTN_TEST_SCALE < 1 visits every
// n-th pattern (n odd) instead of all of them.
constexpr int kShards = 16;
constexpr std::uint64_t kPatterns = std::uint64_t{1} << 32;

std::uint64_t sweep_step() {
  auto step = static_cast<std::uint64_t>(std::llround(1.0 / test_scale()));
  return step <= 1 ? 1 : (step | 1u);
}

class F32Sweep : public ::testing::TestWithParam<int> {};

TEST_P(F32Sweep, ToF16MatchesF16c) {
#if defined(__x86_64__)
  if (!has_f16c()) GTEST_SKIP() << "no F16C on this CPU";
  const std::uint64_t step = sweep_step(), per_shard = kPatterns / kShards;
  const std::uint64_t first = static_cast<std::uint64_t>(GetParam()) * per_shard;
  constexpr std::size_t kChunk = 4096;
  std::vector<float> in(kChunk);
  std::vector<std::uint16_t> hw(kChunk);
  std::uint64_t checked = 0;
  int failures = 0;
  for (std::uint64_t base = first; base < first + per_shard; base += kChunk * step) {
    std::size_t n = 0;
    for (; n < kChunk && base + n * step < first + per_shard; ++n)
      in[n] = std::bit_cast<float>(static_cast<std::uint32_t>(base + n * step));
    for (std::size_t i = n; i < kChunk; ++i) in[i] = 0.0f;
    hw_f32_to_f16(in.data(), hw.data(), kChunk);
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint16_t got = f32_to_f16(in[i]);
      const bool ok = std::isnan(in[i]) ? f16_is_nan(got) && (got & 0x8000u) == (hw[i] & 0x8000u)
                                        : got == hw[i];
      if (!ok && failures++ < 10)
        ADD_FAILURE() << "f32 0x" << std::hex << std::bit_cast<std::uint32_t>(in[i]) << " ("
                      << in[i] << ") -> 0x" << got << ", F16C gives 0x" << hw[i];
    }
    checked += n;
  }
  EXPECT_EQ(failures, 0);
  // Spot-check the scalar instruction too.
  for (const float f : {1.0f, -3.14159f, 65519.0f, 1e-7f, -6e-8f, 3e-5f, 1e30f})
    EXPECT_EQ(f32_to_f16(f), hw_f32_to_f16(f)) << f;
  EXPECT_GT(checked, 0u);
#else
  GTEST_SKIP() << "not x86-64";
#endif
}

TEST_P(F32Sweep, ToBf16RoundsToNearestEven) {
  const std::uint64_t step = sweep_step(), per_shard = kPatterns / kShards;
  const std::uint64_t first = static_cast<std::uint64_t>(GetParam()) * per_shard;
  constexpr std::size_t kChunk = 4096;
  std::vector<float> in(kChunk);
  std::vector<std::uint16_t> hw(kChunk);
  bool use_hw = false;
#if defined(__x86_64__)
  use_hw = has_avx512_bf16();
#endif
  int failures = 0;
  for (std::uint64_t base = first; base < first + per_shard; base += kChunk * step) {
    std::size_t n = 0;
    for (; n < kChunk && base + n * step < first + per_shard; ++n)
      in[n] = std::bit_cast<float>(static_cast<std::uint32_t>(base + n * step));
    for (std::size_t i = n; i < kChunk; ++i) in[i] = 0.0f;
#if defined(__x86_64__)
    if (use_hw) hw_f32_to_bf16(in.data(), hw.data(), kChunk);
#endif
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t u = std::bit_cast<std::uint32_t>(in[i]);
      const std::uint16_t got = f32_to_bf16(in[i]);
      bool ok = std::isnan(in[i]) ? bf16_is_nan(got) && (got & 0x8000u) == ((u >> 16) & 0x8000u)
                                  : got == bf16_rne_bits(u);
      // The instruction flushes denormal inputs, so it is compared on the other inputs only.
      if (use_hw && (u & 0x7f800000u) != 0)
        ok = ok && (std::isnan(in[i]) ? bf16_is_nan(hw[i]) : got == hw[i]);
      if (!ok && failures++ < 10)
        ADD_FAILURE() << "f32 0x" << std::hex << u << " (" << in[i] << ") -> 0x" << got
                      << ", expected 0x" << bf16_rne_bits(u) << " (hardware 0x" << hw[i] << ")";
    }
  }
  EXPECT_EQ(failures, 0);
}

INSTANTIATE_TEST_SUITE_P(Shards, F32Sweep, ::testing::Range(0, kShards));

}  // namespace
}  // namespace tileattn::test
