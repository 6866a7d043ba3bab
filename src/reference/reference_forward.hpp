#pragma once
#include "api/params.hpp"

namespace tileattn::detail {
// The standard three-stage attention (scores, softmax, weighted sum) in double precision.
// Stores one head's full Lq x Lk score matrix: the oracle every other backend is tested against.
void reference_forward(const AttnParams& p, int threads);
}  // namespace tileattn::detail
