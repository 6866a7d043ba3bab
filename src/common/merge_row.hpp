// The weights of one row's merge, shared by the host and CUDA implementations so that both give
// the same special cases: a part with lse = -inf weighs exactly 0 (its out is never read), a
// row with every part at -inf is empty, a NaN or +inf lse poisons the row.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define TILEATTN_MERGE_HD __host__ __device__
#else
#define TILEATTN_MERGE_HD
#endif

namespace tileattn::detail {

enum class MergedRow { empty, poisoned, weighted };

// lse[0..n) of the row -> weight[i] = exp(lse_i - lse) (0 for -inf parts) and the merged lse.
TILEATTN_MERGE_HD inline MergedRow merge_weights(const float* lse, int n, float* weight,
                                                 float* merged_lse) {
  float top = -INFINITY;
  for (int i = 0; i < n; ++i) {
    if (!(lse[i] < INFINITY)) {  // NaN or +inf
      *merged_lse = NAN;
      return MergedRow::poisoned;
    }
    top = fmaxf(top, lse[i]);
  }
  if (top == -INFINITY) {
    *merged_lse = -INFINITY;
    return MergedRow::empty;
  }
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) {
    weight[i] = lse[i] == -INFINITY ? 0.0f : expf(lse[i] - top);
    sum += weight[i];
  }
  const float inv = 1.0f / sum;  // sum >= 1: the top part weighs 1
  for (int i = 0; i < n; ++i) weight[i] *= inv;
  *merged_lse = top + logf(sum);
  return MergedRow::weighted;
}

}  // namespace tileattn::detail
