#include "naive_baseline.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "api/validate.hpp"
#include "common/params.hpp"
#include "common/threads.hpp"
#include "naive_softmax.hpp"

namespace tileattn::bench {
namespace {

// The softmax pass, compiled once per instruction set (naive_softmax_*.cpp), picked at run time.
using SoftmaxRow = void (*)(float*, std::int64_t, std::int64_t, std::int64_t);
SoftmaxRow select_softmax_row() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq"))
    return softmax_row_avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return softmax_row_avx2;
  return softmax_row_generic;
}

}  // namespace

const char* to_string(BaselineThreading t) noexcept {
  return t == BaselineThreading::heads ? "heads" : "blas";
}

NaiveBaseline::NaiveBaseline(const tools::AttentionBuffers& buffers, const AttentionArgs& args,
                             BaselineThreading threading, int threads)
    : q32_(tools::convert(buffers.q, DType::f32)),
      k32_(tools::convert(buffers.k, DType::f32)),
      v32_(tools::convert(buffers.v, DType::f32)),
      out_(DType::f32, buffers.out.shape()),
      args_(args),
      threading_(threading),
      threads_(detail::resolve_threads(threads)) {
  if (args.mask.present() || args.alibi_slopes.present())
    throw tools::ToolError("the naive baseline supports no mask and no ALiBi");
  args_.key_lengths = buffers.key_lengths.view("key_lengths");
  const auto layout_view = [&](const tools::HostTensor& t, const char* name) {
    const Tensor v = t.view(name);
    return buffers.layout == tools::Layout::bhsd ? bhsd_as_bshd(v) : v;
  };
  args_.q = layout_view(q32_, "q");
  args_.k = layout_view(k32_, "k");
  args_.v = layout_view(v32_, "v");
  args_.out = layout_view(out_, "out");
  params_ = detail::validate_forward(args_);
  // heads mode: one score matrix per thread, and no more threads than (batch, head) pairs.
  if (threading_ == BaselineThreading::heads)
    threads_ = static_cast<int>(std::min<std::int64_t>(threads_, params_.batch * params_.heads_q));
  const std::int64_t copies = threading_ == BaselineThreading::heads ? threads_ : 1;
  scores_.resize(static_cast<std::size_t>(copies * params_.len_q * params_.len_k));
}

double NaiveBaseline::bytes_needed(std::int64_t batch, std::int64_t heads, std::int64_t len_q,
                                   std::int64_t len_k, std::int64_t dim, std::int64_t dim_v,
                                   std::int64_t kv_heads, DType dtype, BaselineThreading threading,
                                   int threads) {
  const auto d = [](std::int64_t x) { return static_cast<double>(x); };
  const double copies = threading == BaselineThreading::heads
                            ? std::min(d(detail::resolve_threads(threads)), d(batch) * d(heads))
                            : 1.0;
  double bytes =
      copies * d(len_q) * d(len_k) * 4.0 + d(batch) * d(len_q) * d(heads) * d(dim_v) * 4.0;
  if (dtype != DType::f32)
    bytes +=
        (d(len_q) * d(heads) * d(dim) + d(len_k) * d(kv_heads) * d(dim + dim_v)) * d(batch) * 4.0;
  return bytes;
}

void NaiveBaseline::head(std::int64_t b, std::int64_t h, float* scores, bool parallel_rows) {
  static const SoftmaxRow softmax_row = select_softmax_row();
  const detail::AttnParams& p = params_;
  const std::int64_t Lq = p.len_q, Lk = p.len_k;
  const float* q = static_cast<const float*>(p.q) + b * p.q_stride_b + h * p.q_stride_h;
  const std::int64_t hk = h / p.heads_per_kv;
  const float* k = static_cast<const float*>(p.k) + b * p.k_stride_b + hk * p.k_stride_h;
  const float* v = static_cast<const float*>(p.v) + b * p.v_stride_b + hk * p.v_stride_h;
  float* o = static_cast<float*>(p.out) + b * p.o_stride_b + h * p.o_stride_h;
  const auto i = [](std::int64_t x) { return static_cast<blasint>(x); };

  // S = scale · Q Kᵀ   (Lq, Lk)
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i(Lq), i(Lk), i(p.dim), p.scale, q,
              i(p.q_stride_l), k, i(p.k_stride_l), 0.0f, scores, i(Lk));
  // P = softmax(mask(S)) row by row   (Lq, Lk)
#pragma omp parallel for schedule(static) if (parallel_rows) num_threads(threads_)
  for (std::int64_t row = 0; row < Lq; ++row) {
    const detail::KeyRange keys = detail::visible_keys(p, b, row);
    float* s = scores + row * Lk;
    if (p.softcap > 0.0f)
      for (std::int64_t j = keys.first; j < keys.last; ++j)
        s[j] = p.softcap * std::tanh(s[j] / p.softcap);
    softmax_row(s, Lk, keys.first, keys.last);
  }
  // O = P V   (Lq, Dv)
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i(Lq), i(p.dim_v), i(Lk), 1.0f, scores,
              i(Lk), v, i(p.v_stride_l), 0.0f, o, i(p.o_stride_l));
}

void NaiveBaseline::run() {
  const detail::AttnParams& p = params_;
  const std::int64_t pairs = p.batch * p.heads_q;
  const std::size_t score_elems = static_cast<std::size_t>(p.len_q * p.len_k);
  if (p.len_q == 0) return;
  if (threading_ == BaselineThreading::heads) {
    openblas_set_num_threads(1);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads_)
    for (std::int64_t pair = 0; pair < pairs; ++pair) {
      const auto slot = static_cast<std::size_t>(omp_get_thread_num());
      head(pair / p.heads_q, pair % p.heads_q, scores_.data() + slot * score_elems, false);
    }
  } else {
    openblas_set_num_threads(threads_);
    for (std::int64_t pair = 0; pair < pairs; ++pair)
      head(pair / p.heads_q, pair % p.heads_q, scores_.data(), true);
  }
}

}  // namespace tileattn::bench
