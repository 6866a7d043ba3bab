// The tool's own f16/bf16 conversions (tools/float16.hpp: the tool sees only the public API) give
// the same bits as the library's (src/common/float_convert.hpp) for every 16-bit pattern and for
// a sweep of f32 patterns that covers every exponent, the rounding ties, NaN and infinity.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>

#include "common/float_convert.hpp"
#include "float16.hpp"

namespace tileattn::cli_test {
namespace {

TEST(ToolFloat16, SixteenBitPatternsToF32) {
  for (std::uint32_t h = 0; h <= 0xffffu; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    ASSERT_EQ(std::bit_cast<std::uint32_t>(tools::f16_to_f32(bits)),
              std::bit_cast<std::uint32_t>(detail::f16_to_f32(bits)))
        << "f16 " << h;
    ASSERT_EQ(std::bit_cast<std::uint32_t>(tools::bf16_to_f32(bits)),
              std::bit_cast<std::uint32_t>(detail::bf16_to_f32(bits)))
        << "bf16 " << h;
  }
}

TEST(ToolFloat16, F32PatternsTo16Bit) {
  // A prime step visits every exponent and many low-bit patterns; the 16-bit values' neighbours
  // (exactly halfway and one ulp either side) are the rounding cases.
  const auto check = [](std::uint32_t u) {
    const float f = std::bit_cast<float>(u);
    ASSERT_EQ(tools::f32_to_f16(f), detail::f32_to_f16(f)) << "f32 bits " << u;
    ASSERT_EQ(tools::f32_to_bf16(f), detail::f32_to_bf16(f)) << "f32 bits " << u;
  };
  for (std::uint64_t u = 0; u <= 0xffffffffu; u += 65521) check(static_cast<std::uint32_t>(u));
  for (std::uint32_t h = 0; h <= 0xffffu; ++h) {
    const std::uint32_t from_f16 = std::bit_cast<std::uint32_t>(
                            detail::f16_to_f32(static_cast<std::uint16_t>(h))),
                        from_bf16 = h << 16;
    for (const std::uint32_t base : {from_f16, from_bf16})
      for (const std::uint32_t offset :
           {0x0u, 0x1u, 0xfffu, 0x1000u, 0x1001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu})
        check(base + offset);
  }
}

}  // namespace
}  // namespace tileattn::cli_test
