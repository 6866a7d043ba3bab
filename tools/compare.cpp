#include "compare.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tileattn::tools {

ErrorStats compare(const HostTensor& result, const HostTensor& reference) {
  ErrorStats s;
  if (result.numel() != reference.numel()) throw ToolError("compare: element counts differ");
  constexpr double inf = std::numeric_limits<double>::infinity();
  double diff2 = 0.0, ref2 = 0.0;
  for (std::int64_t i = 0; i < result.numel(); ++i) {
    const double x = load_f32(result, i), r = load_f32(reference, i);
    ++s.count;
    if (std::isinf(r) && x == r) continue;
    if (!std::isfinite(x) || !std::isfinite(r)) {
      s.max_abs = s.rel_l2 = inf;
      return s;
    }
    diff2 += (x - r) * (x - r);
    ref2 += r * r;
    s.max_abs = std::max(s.max_abs, std::abs(x - r));
  }
  s.rel_l2 = ref2 > 0.0 ? std::sqrt(diff2 / ref2) : (diff2 > 0.0 ? inf : 0.0);
  return s;
}

}  // namespace tileattn::tools
