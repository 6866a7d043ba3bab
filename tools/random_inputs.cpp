#include "random_inputs.hpp"

#include <chrono>
#include <cmath>
#include <numbers>
#include <random>

#include "float16.hpp"

namespace tileattn::tools {
namespace {

// splitmix64 finaliser: a good 64-bit mix of (seed, counter).
std::uint64_t mix(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in (0, 1] from the top 24 bits.
float unit_interval(std::uint64_t bits) noexcept {
  return (static_cast<float>(bits >> 40) + 1.0f) * 0x1.0p-24f;
}

}  // namespace

void fill_normal(HostTensor& t, std::uint64_t seed) {
  const std::int64_t n = t.numel();
  const std::int64_t pairs = (n + 1) / 2;
  const DType dtype = t.dtype();
  void* data = t.data();
  const std::uint64_t key = mix(seed);
  constexpr float two_pi = 2.0f * std::numbers::pi_v<float>;
#pragma omp parallel for schedule(static)
  for (std::int64_t p = 0; p < pairs; ++p) {
    const std::uint64_t bits = mix(key ^ static_cast<std::uint64_t>(p));
    // Box-Muller: two independent normals from two uniforms.
    const float radius = std::sqrt(-2.0f * std::log(unit_interval(bits)));
    const float angle = two_pi * unit_interval(bits << 24);
    store_from_f32(data, dtype, 2 * p, radius * std::cos(angle));
    if (2 * p + 1 < n) store_from_f32(data, dtype, 2 * p + 1, radius * std::sin(angle));
  }
}

std::uint64_t fresh_seed() {
  std::random_device rd;
  const auto now = static_cast<std::uint64_t>(
      std::chrono::high_resolution_clock::now().time_since_epoch().count());
  return mix(now ^ (static_cast<std::uint64_t>(rd()) << 32 | rd())) & 0xffffffffffffull;
}

}  // namespace tileattn::tools
