#include "reference/reference_math.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "api/score_mods.hpp"
#include "common/float_convert.hpp"
#include "common/philox.hpp"

namespace tileattn::detail {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Softmax probabilities P [Lq][Lk] (before dropout; rows of a fully masked query are 0) and
// the derivative of each modified score with respect to its raw dot product q_i . k_j.
struct Probabilities {
  std::vector<double> p, dscore_ddot;
  std::vector<double> lse;  // [Lq]
};

Probabilities probabilities(const AttnParams& prm, std::int64_t b, std::int64_t h,
                            const HeadInputs& in) {
  const std::int64_t Lq = prm.len_q, Lk = prm.len_k, D = prm.dim;
  Probabilities r;
  r.p.resize(static_cast<std::size_t>(Lq * Lk));
  r.dscore_ddot.resize(r.p.size());
  r.lse.resize(static_cast<std::size_t>(Lq));
  const double scale = prm.scale, cap = prm.softcap;
  for (std::int64_t i = 0; i < Lq; ++i) {
    double* row = r.p.data() + i * Lk;
    double row_max = kNegInf;
    for (std::int64_t j = 0; j < Lk; ++j) {
      double dot = 0.0;
      for (std::int64_t d = 0; d < D; ++d) dot += in.q[i * D + d] * in.k[j * D + d];
      row[j] = modified_score<double>(prm, b, h, i, j, dot);
      row_max = std::max(row_max, row[j]);
      // d(c * tanh(scale * dot / c)) / d dot = scale * (1 - tanh^2); the other steps add
      // constants.
      const double t = cap > 0.0 ? std::tanh(scale * dot / cap) : 0.0;
      r.dscore_ddot[i * Lk + j] = scale * (1.0 - t * t);
    }
    double sum = 0.0;
    if (row_max != kNegInf)
      for (std::int64_t j = 0; j < Lk; ++j) {
        row[j] = std::exp(row[j] - row_max);
        sum += row[j];
      }
    for (std::int64_t j = 0; j < Lk; ++j) row[j] = sum > 0.0 ? row[j] / sum : 0.0;
    r.lse[i] = sum > 0.0 ? row_max + std::log(sum) : kNegInf;
  }
  return r;
}

// The dropout multiplier of element (i, j): 0 if dropped, 1 / (1 - p) if kept, 1 without dropout.
double dropout_factor(const AttnParams& p, std::int64_t b, std::int64_t h, std::int64_t i,
                      std::int64_t j) {
  if (!p.has_dropout()) return 1.0;
  return dropout_keeps(p.dropout, b, h, i, j) ? static_cast<double>(p.dropout.keep_scale) : 0.0;
}

}  // namespace

HeadInputs load_head(const AttnParams& p, std::int64_t b, std::int64_t h,
                     const AttnBackwardParams* grad) {
  const std::int64_t Lq = p.len_q, Lk = p.len_k, D = p.dim, Dv = p.dim_v;
  const std::int64_t hk = h / p.heads_per_kv;
  HeadInputs in;
  in.q.resize(static_cast<std::size_t>(Lq * D));
  in.k.resize(static_cast<std::size_t>(Lk * D));
  in.v.resize(static_cast<std::size_t>(Lk * Dv));
  for (std::int64_t i = 0; i < Lq; ++i)
    for (std::int64_t d = 0; d < D; ++d)
      in.q[i * D + d] =
          load_as_f32(p.q, p.dtype, b * p.q_stride_b + i * p.q_stride_l + h * p.q_stride_h + d);
  for (std::int64_t j = 0; j < Lk; ++j) {
    for (std::int64_t d = 0; d < D; ++d)
      in.k[j * D + d] =
          load_as_f32(p.k, p.dtype, b * p.k_stride_b + j * p.k_stride_l + hk * p.k_stride_h + d);
    for (std::int64_t d = 0; d < Dv; ++d)
      in.v[j * Dv + d] =
          load_as_f32(p.v, p.dtype, b * p.v_stride_b + j * p.v_stride_l + hk * p.v_stride_h + d);
  }
  if (grad != nullptr) {
    in.dout.resize(static_cast<std::size_t>(Lq * Dv));
    for (std::int64_t i = 0; i < Lq; ++i)
      for (std::int64_t d = 0; d < Dv; ++d)
        in.dout[i * Dv + d] = load_as_f32(
            grad->dout, grad->dout_dtype,
            b * grad->do_stride_b + i * grad->do_stride_l + h * grad->do_stride_h + d);
  }
  return in;
}

void head_forward(const AttnParams& p, std::int64_t b, std::int64_t h, const HeadInputs& in,
                  double* out, double* lse) {
  const std::int64_t Lq = p.len_q, Lk = p.len_k, Dv = p.dim_v;
  const Probabilities pr = probabilities(p, b, h, in);
  std::fill(out, out + Lq * Dv, 0.0);
  for (std::int64_t i = 0; i < Lq; ++i) {
    lse[i] = pr.lse[i];
    for (std::int64_t j = 0; j < Lk; ++j) {
      const double w = pr.p[i * Lk + j] * dropout_factor(p, b, h, i, j);
      if (w == 0.0) continue;
      for (std::int64_t d = 0; d < Dv; ++d) out[i * Dv + d] += w * in.v[j * Dv + d];
    }
  }
}

void head_backward(const AttnParams& p, std::int64_t b, std::int64_t h, const HeadInputs& in,
                   double* dq, double* dk, double* dv) {
  const std::int64_t Lq = p.len_q, Lk = p.len_k, D = p.dim, Dv = p.dim_v;
  const Probabilities pr = probabilities(p, b, h, in);
  std::vector<double> dp(static_cast<std::size_t>(Lk));
  std::fill(dq, dq + Lq * D, 0.0);
  for (std::int64_t i = 0; i < Lq; ++i) {
    const double* prob = pr.p.data() + i * Lk;
    const double* g_out = in.dout.data() + i * Dv;
    // With Z the keep mask: out = (P o Z / (1 - p)) V, so dV += (P o Z / (1 - p))^T dout and
    // dP = (dout V^T) o Z / (1 - p); then dS = P o (dP - rowsum(P o dP)).
    double delta = 0.0;
    for (std::int64_t j = 0; j < Lk; ++j) {
      const double keep = dropout_factor(p, b, h, i, j);
      double dot = 0.0;
      for (std::int64_t d = 0; d < Dv; ++d) dot += g_out[d] * in.v[j * Dv + d];
      dp[j] = dot * keep;
      delta += prob[j] * dp[j];
      const double w = prob[j] * keep;
      if (w != 0.0)
        for (std::int64_t d = 0; d < Dv; ++d) dv[j * Dv + d] += w * g_out[d];
    }
    for (std::int64_t j = 0; j < Lk; ++j) {
      const double g = prob[j] * (dp[j] - delta) * pr.dscore_ddot[i * Lk + j];
      if (g == 0.0) continue;
      for (std::int64_t d = 0; d < D; ++d) {
        dq[i * D + d] += g * in.k[j * D + d];
        dk[j * D + d] += g * in.q[i * D + d];
      }
    }
  }
}

}  // namespace tileattn::detail
