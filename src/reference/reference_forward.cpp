#include "reference/reference_forward.hpp"

#include <limits>
#include <vector>

#include "common/float_convert.hpp"
#include "common/threads.hpp"
#include "reference/reference_math.hpp"

namespace tileattn::detail {
namespace {

void reference_head(const AttnParams& p, std::int64_t b, std::int64_t h) {
  const std::int64_t Lq = p.len_q, Dv = p.dim_v;
  const HeadInputs in = load_head(p, b, h);
  std::vector<double> out(static_cast<std::size_t>(Lq * Dv)), lse(static_cast<std::size_t>(Lq));
  head_forward(p, b, h, in, out.data(), lse.data());
  for (std::int64_t i = 0; i < Lq; ++i) {
    for (std::int64_t d = 0; d < Dv; ++d)
      store_from_f32(p.out, p.out_dtype, b * p.o_stride_b + i * p.o_stride_l + h * p.o_stride_h + d,
                     static_cast<float>(out[i * Dv + d]));
    if (p.lse != nullptr)
      p.lse[b * p.lse_stride_b + h * p.lse_stride_h + i * p.lse_stride_l] =
          static_cast<float>(lse[i]);
  }
}

void store_rows(void* base, DType dtype, std::int64_t offset0, std::int64_t row_stride,
                std::int64_t rows, std::int64_t cols, const double* src) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      store_from_f32(base, dtype, offset0 + r * row_stride + c,
                     static_cast<float>(src[r * cols + c]));
}

// dk and dv of one (batch, kv head): the sum over the query heads of its group.
void reference_kv_head(const AttnBackwardParams& p, std::int64_t b, std::int64_t hk) {
  const std::int64_t Lq = p.len_q, Lk = p.len_k, D = p.dim, Dv = p.dim_v;
  std::vector<double> dq(static_cast<std::size_t>(Lq * D)), dk(static_cast<std::size_t>(Lk * D)),
      dv(static_cast<std::size_t>(Lk * Dv));
  for (std::int64_t g = 0; g < p.heads_per_kv; ++g) {
    const std::int64_t h = hk * p.heads_per_kv + g;
    const HeadInputs in = load_head(p, b, h, &p);
    head_backward(p, b, h, in, dq.data(), dk.data(), dv.data());
    store_rows(p.dq, p.dq_dtype, b * p.dq_stride_b + h * p.dq_stride_h, p.dq_stride_l, Lq, D,
               dq.data());
  }
  store_rows(p.dk, p.dk_dtype, b * p.dk_stride_b + hk * p.dk_stride_h, p.dk_stride_l, Lk, D,
             dk.data());
  store_rows(p.dv, p.dv_dtype, b * p.dv_stride_b + hk * p.dv_stride_h, p.dv_stride_l, Lk, Dv,
             dv.data());
}

}  // namespace

void reference_forward(const AttnParams& p, int threads) {
  const std::int64_t heads = p.batch * p.heads_q;
#pragma omp parallel for schedule(dynamic) num_threads(resolve_threads(threads))
  for (std::int64_t bh = 0; bh < heads; ++bh) reference_head(p, bh / p.heads_q, bh % p.heads_q);
}

void reference_backward(const AttnBackwardParams& p, int threads) {
  const std::int64_t pairs = p.batch * p.heads_kv;
#pragma omp parallel for schedule(dynamic) num_threads(resolve_threads(threads))
  for (std::int64_t pair = 0; pair < pairs; ++pair)
    reference_kv_head(p, pair / p.heads_kv, pair % p.heads_kv);
}

}  // namespace tileattn::detail
