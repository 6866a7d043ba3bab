// Division by a divisor known only at run time but fixed for a launch, as a multiply-high, an
// add and a shift (the magic-number method): a device's integer division is a long
// floating-point sequence, and a kernel that divides by the GQA group or the head dim in its
// index arithmetic pays for it in instructions and in code size.
#pragma once

#include <cstdint>

#include "common/host_device.hpp"

namespace tileattn::cuda {

// n / d and n % d for 0 <= n < 2^31 and 1 <= d < 2^31: with s = ceil(log2 d) and
// m = floor(2^32 (2^s - d) / d) + 1, n / d = (mulhi(n, m) + n) >> s (the sum fits 32 bits
// because mulhi(n, m) < n < 2^31).
struct FastDivmod {
  std::uint32_t divisor = 1, multiplier = 0, shift = 0;

  FastDivmod() = default;
  explicit FastDivmod(int d) : divisor(static_cast<std::uint32_t>(d)) {
    while ((std::uint32_t{1} << shift) < divisor) ++shift;
    multiplier = static_cast<std::uint32_t>(
        ((std::uint64_t{1} << 32) * ((std::uint64_t{1} << shift) - divisor)) / divisor + 1);
    if (divisor == 1) multiplier = 0;
  }

  TILEATTN_HOST_DEVICE int div(int n) const {
    const auto u = static_cast<std::uint32_t>(n);
#if defined(__CUDA_ARCH__)
    const std::uint32_t hi = __umulhi(u, multiplier);
#else
    const auto hi = static_cast<std::uint32_t>((std::uint64_t{u} * multiplier) >> 32);
#endif
    return static_cast<int>((hi + u) >> shift);
  }
  TILEATTN_HOST_DEVICE int mod(int n) const {
    return n - div(n) * static_cast<int>(divisor);
  }
};

}  // namespace tileattn::cuda
