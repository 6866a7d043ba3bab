#include "cpu/merge_states.hpp"

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/float_convert.hpp"
#include "common/merge_row.hpp"
#include "common/threads.hpp"

namespace tileattn::detail {

void cpu_merge_states(const MergeParams& p, int threads) {
  const std::int64_t rows = p.batch * p.len * p.heads;
  const int n = p.num_parts;
#pragma omp parallel num_threads(resolve_threads(threads))
  {
    std::vector<float> acc(static_cast<std::size_t>(p.dim));
    float lse[kMaxMergeParts], weight[kMaxMergeParts];
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t h = r % p.heads, l = r / p.heads % p.len, b = r / p.heads / p.len;
      for (int i = 0; i < n; ++i) {
        const MergeOperand& part = p.parts[i];
        lse[i] = part.lse[b * part.lse_stride_b + h * part.lse_stride_h + l * part.lse_stride_l];
      }
      float merged_lse = 0.0f;
      const MergedRow kind = merge_weights(lse, n, weight, &merged_lse);
      const float fill = kind == MergedRow::poisoned ? NAN : 0.0f;
      for (float& a : acc) a = fill;
      if (kind == MergedRow::weighted) {
        for (int i = 0; i < n; ++i) {
          if (lse[i] == -INFINITY) continue;  // never read: it may hold anything
          const MergeOperand& part = p.parts[i];
          const std::int64_t base = b * part.o_stride_b + l * part.o_stride_l + h * part.o_stride_h;
          for (std::int64_t d = 0; d < p.dim; ++d)
            acc[d] += weight[i] * load_as_f32(part.out, part.dtype, base + d);
        }
      }
      const MergeOperand& res = p.result;
      const std::int64_t base = b * res.o_stride_b + l * res.o_stride_l + h * res.o_stride_h;
      for (std::int64_t d = 0; d < p.dim; ++d) store_from_f32(res.out, res.dtype, base + d, acc[d]);
      if (res.lse != nullptr)
        res.lse[b * res.lse_stride_b + h * res.lse_stride_h + l * res.lse_stride_l] = merged_lse;
    }
  }
}

}  // namespace tileattn::detail
