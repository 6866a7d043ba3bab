// Seeded random inputs for bench, verify and demo. Counter-based (element i depends only on the
// seed and i), so the values do not depend on the thread count and fill in parallel in place.
#pragma once

#include <cstdint>

#include "tensor_io.hpp"

namespace tileattn::tools {

// Fills a float tensor (f32, f16 or bf16 storage) with N(0, 1) values.
void fill_normal(HostTensor& t, std::uint64_t seed);

// A seed from the clock and std::random_device, for "fresh inputs every run".
std::uint64_t fresh_seed();

}  // namespace tileattn::tools
