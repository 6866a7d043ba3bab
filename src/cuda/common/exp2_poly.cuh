// 2^x on the FMA and integer pipes instead of the MUFU (16 exponentials per clock per SM, the
// softmax's narrowest unit at D = 64), for a share of the sm90 forward's exponentials
// (Sm90TileConfig::exp_poly_every). Host and device, so that tests/cuda/test_exp2_poly.cpp
// checks the same arithmetic without a GPU.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace tileattn::cuda {

// x = n + f with n = round(x) (the 1.5 * 2^23 trick) and f in [-0.5, 0.5]; 2^f by a cubic
// fitted for relative error (7.5e-5 at most, below bf16's and f16's rounding of P); 2^n built
// as a float from n's bits. x is clamped to -127 first, where the built 2^n is +0, so -inf (a
// masked score) and anything below -126.5 give +0, as ex2.approx. Valid for x <= 127. Nine
// instructions on the device, none of them MUFU.
__host__ __device__ inline float exp2_poly(float x) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: x + kRound has round(x) in its low bits
  x = fmaxf(x, -127.0f);
  const float shifted = x + kRound;
  const float f = x - (shifted - kRound);
  const float p = fmaf(fmaf(fmaf(0.0551716685f, f, 0.24261114f), f, 0.69326097f), f, 0.99992806f);
  std::uint32_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  bits = (bits << 23) + 0x3f800000u;  // (n + 127) << 23: the float 2^n (+0 for n = -127)
  float two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  return p * two_n;
}

}  // namespace tileattn::cuda
