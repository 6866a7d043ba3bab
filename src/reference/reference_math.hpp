// The double-precision attention of one (batch, query head), forward and backward, on row-major
// double matrices: the math of the reference backend, also called directly by the
// finite-difference test of the backward (tests/cpu/test_reference_gradients.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "common/params.hpp"

namespace tileattn::detail {

// q [Lq][D] of query head h, k [Lk][D] and v [Lk][Dv] of its kv head, dout [Lq][Dv] (backward).
struct HeadInputs {
  std::vector<double> q, k, v, dout;
};
// Reads one head's operands from the tensors of `p` (dout only when `grad` is given).
HeadInputs load_head(const AttnParams& p, std::int64_t b, std::int64_t h,
                     const AttnBackwardParams* grad = nullptr);

// out [Lq][Dv] (dropout applied) and lse [Lq] (-inf for a fully masked row).
void head_forward(const AttnParams& p, std::int64_t b, std::int64_t h, const HeadInputs& in,
                  double* out, double* lse);

// The exact gradient of sum(out * dout): dq [Lq][D] is written, dk [Lk][D] and dv [Lk][Dv] are
// added to (so that GQA sums over a group's query heads).
void head_backward(const AttnParams& p, std::int64_t b, std::int64_t h, const HeadInputs& in,
                   double* dq, double* dk, double* dv);

}  // namespace tileattn::detail
