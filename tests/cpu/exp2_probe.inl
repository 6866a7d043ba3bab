// The CPU kernels' vector exp2 (cpu/simd.hpp) for one instruction set, callable from a test.
// The including file defines TILEATTN_ISA_NAMESPACE and EXP2_PROBE (the function's name) and is
// compiled with that instruction set's flags (tests/cpu/CMakeLists.txt).
#include <cstdint>

#include "cpu/simd.hpp"

namespace tileattn::test {

// out[i] = exp2_nonpositive(in[i]) for i < n (n a multiple of 16).
void EXP2_PROBE(const float* in, float* out, std::int64_t n) {
  using namespace tileattn::detail::TILEATTN_ISA_NAMESPACE;
  for (std::int64_t i = 0; i < n; i += VecF::lanes) store(out + i, exp2_nonpositive(load(in + i)));
}

}  // namespace tileattn::test
