// Non-finite canaries for the backend tests (docs/semantics.md, "Non-finite values"): poison a
// Problem's inputs in every masked-position class or anywhere, and compare a backend's result
// with the reference's NaN pattern and values. Shared by the CPU and CUDA suites.
#pragma once

#include <cstdint>
#include <vector>

#include "attention_case.hpp"

namespace tileattn::test {

enum class Poison : std::uint8_t {
  masked_keys,  // only keys that no row of any head of their group may see: results unchanged
  anywhere,     // random keys, query rows (and, backward, dout rows), visible or not
  values,       // one V element (NaN or +-Inf) of random keys, visible to some rows or not
};
const char* to_string(Poison p);

// Poisons the problem's inputs (NaN, +-Inf and, behind masks, finite garbage); `dout`
// (backward) may be null.
void poison_inputs(Problem& pb, HostTensor* dout, Poison mode, Rng& rng);

// got against ref: NaN exactly where ref is NaN, -inf exactly where ref is -inf, and the finite
// elements within tol * max|ref| (+ abs_eps).
void expect_matches(const std::vector<float>& got, const std::vector<float>& ref, double tol,
                    double abs_eps, const char* what);

// The cases: every masked-position class, in full and partial key blocks; f32 out.
CaseList poison_cases();

// Element offset of logical [B, L, H, D] operands.
inline std::int64_t at(std::int64_t b, std::int64_t l, std::int64_t h, std::int64_t d,
                       std::int64_t L, std::int64_t H, std::int64_t D) {
  return ((b * L + l) * H + h) * D + d;
}

}  // namespace tileattn::test
