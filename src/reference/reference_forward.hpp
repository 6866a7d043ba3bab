#pragma once
#include "common/params.hpp"

namespace tileattn::detail {
// The standard three-stage attention (scores, softmax, weighted sum) in double precision.
// Stores one head's full Lq x Lk score matrix: the oracle every other backend is tested against.
void reference_forward(const AttnParams& p, int threads);

// Its exact gradient (dq, dk, dv) in double precision, from q, k, v and dout alone: the
// probabilities are recomputed in double, not taken from out and lse.
void reference_backward(const AttnBackwardParams& p, int threads);
}  // namespace tileattn::detail
