#include "reference/reference_forward.hpp"

#include <cmath>
#include <algorithm>
#include <limits>
#include <vector>

#include "api/score_mods.hpp"
#include "common/float_convert.hpp"
#include "common/threads.hpp"

namespace tileattn::detail {
namespace {

void reference_head(const AttnParams& p, std::int64_t b, std::int64_t h) {
  const std::int64_t Lq = p.len_q, Lk = p.len_k, D = p.dim, Dv = p.dim_v;
  const std::int64_t hk = h / p.heads_per_kv;
  std::vector<double> q(static_cast<std::size_t>(Lq * D)), k(static_cast<std::size_t>(Lk * D)),
      v(static_cast<std::size_t>(Lk * Dv));
  for (std::int64_t i = 0; i < Lq; ++i)
    for (std::int64_t d = 0; d < D; ++d)
      q[i * D + d] = load_as_f32(p.q, p.dtype, b * p.q_stride_b + i * p.q_stride_l + h * p.q_stride_h + d);
  for (std::int64_t j = 0; j < Lk; ++j) {
    for (std::int64_t d = 0; d < D; ++d)
      k[j * D + d] = load_as_f32(p.k, p.dtype, b * p.k_stride_b + j * p.k_stride_l + hk * p.k_stride_h + d);
    for (std::int64_t d = 0; d < Dv; ++d)
      v[j * Dv + d] = load_as_f32(p.v, p.dtype, b * p.v_stride_b + j * p.v_stride_l + hk * p.v_stride_h + d);
  }

  // Stage 1: the full score matrix.
  std::vector<double> scores(static_cast<std::size_t>(Lq * Lk));
  for (std::int64_t i = 0; i < Lq; ++i)
    for (std::int64_t j = 0; j < Lk; ++j) {
      double dot = 0.0;
      for (std::int64_t d = 0; d < D; ++d) dot += q[i * D + d] * k[j * D + d];
      scores[i * Lk + j] = modified_score<double>(p, b, h, i, j, dot);
    }

  // Stages 2 and 3: softmax per row, then the weighted sum of v.
  std::vector<double> acc(static_cast<std::size_t>(Dv));
  for (std::int64_t i = 0; i < Lq; ++i) {
    double* row = &scores[i * Lk];
    double row_max = -std::numeric_limits<double>::infinity();
    for (std::int64_t j = 0; j < Lk; ++j) row_max = std::max(row_max, row[j]);
    double sum = 0.0;
    if (row_max != -std::numeric_limits<double>::infinity())
      for (std::int64_t j = 0; j < Lk; ++j) {
        row[j] = std::exp(row[j] - row_max);
        sum += row[j];
      }
    std::fill(acc.begin(), acc.end(), 0.0);
    if (sum > 0.0)
      for (std::int64_t j = 0; j < Lk; ++j)
        for (std::int64_t d = 0; d < Dv; ++d) acc[d] += row[j] * v[j * Dv + d];
    for (std::int64_t d = 0; d < Dv; ++d)
      store_from_f32(p.out, p.out_dtype, b * p.o_stride_b + i * p.o_stride_l + h * p.o_stride_h + d,
                     sum > 0.0 ? static_cast<float>(acc[d] / sum) : 0.0f);
    if (p.lse != nullptr)
      p.lse[b * p.lse_stride_b + h * p.lse_stride_h + i * p.lse_stride_l] =
          sum > 0.0 ? static_cast<float>(row_max + std::log(sum))
                    : -std::numeric_limits<float>::infinity();
  }
}

}  // namespace

void reference_forward(const AttnParams& p, int threads) {
  const std::int64_t heads = p.batch * p.heads_q;
  const int num_threads = resolve_threads(threads);
  (void)num_threads;
#pragma omp parallel for schedule(dynamic) num_threads(num_threads)
  for (std::int64_t bh = 0; bh < heads; ++bh) reference_head(p, bh / p.heads_q, bh % p.heads_q);
}

}  // namespace tileattn::detail
