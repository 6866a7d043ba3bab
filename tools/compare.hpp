// Error metrics between a result and the reference: relative L2 error ||x - ref|| / ||ref|| and
// the maximum absolute error. Equal infinities (lse = -inf for fully masked rows) count as exact;
// NaN or a one-sided infinity makes the error infinite.
#pragma once

#include <cstdint>

#include "tensor_io.hpp"

namespace tileattn::tools {

struct ErrorStats {
  double rel_l2 = 0.0;
  double max_abs = 0.0;
  std::int64_t count = 0;
};

ErrorStats compare(const HostTensor& result, const HostTensor& reference);

}  // namespace tileattn::tools
