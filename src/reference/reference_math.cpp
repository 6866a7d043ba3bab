#include "reference/reference_math.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/float_convert.hpp"
#include "common/philox.hpp"
#include "common/score_mods.hpp"

namespace tileattn::detail {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

bool finite_row(const double* x, std::int64_t n) {
  for (std::int64_t d = 0; d < n; ++d)
    if (!std::isfinite(x[d])) return false;
  return true;
}

// The dot product as the kernels accumulate it, in f32 range: a product beyond f32 is +-inf.
double dot_in_f32_range(const double* q, const double* k, std::int64_t D) {
  double dot = 0.0;
  for (std::int64_t d = 0; d < D; ++d) dot += q[d] * k[d];
  constexpr double kMax = std::numeric_limits<float>::max();
  if (dot > kMax) return std::numeric_limits<double>::infinity();
  if (dot < -kMax) return kNegInf;
  return dot;
}

// Softmax probabilities P [Lq][Lk] (before dropout; rows of a fully masked query are 0) and
// the derivative of each modified score with respect to its raw dot product q_i . k_j.
// A row is poisoned (docs/semantics.md, "Non-finite values") when it has a visible key and its
// query, a visible key's K or V, a visible scaled dot product (either sign) or a visible
// modified score (+inf or NaN) is not finite; its P row is then 0 and the caller writes NaN.
struct Probabilities {
  std::vector<double> p, dscore_ddot;
  std::vector<double> lse;                // [Lq]
  std::vector<std::uint8_t> visible;      // [Lq][Lk]
  std::vector<std::uint8_t> poisoned;     // [Lq]
  std::vector<std::uint8_t> any_visible;  // [Lq]
};

Probabilities probabilities(const AttnParams& prm, std::int64_t b, std::int64_t h,
                            const HeadInputs& in) {
  const std::int64_t Lq = prm.len_q, Lk = prm.len_k, D = prm.dim, Dv = prm.dim_v;
  Probabilities r;
  r.p.assign(static_cast<std::size_t>(Lq * Lk), 0.0);
  r.dscore_ddot.assign(r.p.size(), 0.0);
  r.visible.assign(r.p.size(), 0);
  r.lse.resize(static_cast<std::size_t>(Lq));
  r.poisoned.assign(static_cast<std::size_t>(Lq), 0);
  r.any_visible.assign(static_cast<std::size_t>(Lq), 0);
  std::vector<std::uint8_t> key_finite(static_cast<std::size_t>(Lk));
  for (std::int64_t j = 0; j < Lk; ++j)
    key_finite[j] = finite_row(&in.k[j * D], D) && finite_row(&in.v[j * Dv], Dv);
  const double scale = prm.scale, cap = prm.softcap;
  constexpr double kMax = std::numeric_limits<float>::max();
  for (std::int64_t i = 0; i < Lq; ++i) {
    double* row = r.p.data() + i * Lk;
    const bool q_finite = finite_row(&in.q[i * D], D);
    bool poisoned = false, any_visible = false;
    double row_max = kNegInf;
    for (std::int64_t j = 0; j < Lk; ++j) {
      row[j] = kNegInf;
      if (!key_visible(prm, b, h, i, j)) continue;
      r.visible[i * Lk + j] = 1;
      any_visible = true;
      if (!q_finite || !key_finite[j]) {
        poisoned = true;
        continue;
      }
      const double dot = dot_in_f32_range(&in.q[i * D], &in.k[j * D], D);
      // A dot product or scaled score beyond f32's range, either way, poisons the row.
      if (!(std::fabs(scale * dot) <= kMax)) {
        poisoned = true;
        continue;
      }
      double s = modified_score<double>(prm, b, h, i, j, dot);
      if (std::isnan(s) || s > kMax) {
        poisoned = true;
        continue;
      }
      // A modified score (ALiBi, additive mask) below f32's range: weight 0, as in the kernels.
      if (s < -kMax) s = kNegInf;
      row[j] = s;
      row_max = std::max(row_max, s);
      // d(c * tanh(scale * dot / c)) / d dot = scale * (1 - tanh^2); the other steps add
      // constants.
      const double t = cap > 0.0 ? std::tanh(scale * dot / cap) : 0.0;
      r.dscore_ddot[i * Lk + j] = scale * (1.0 - t * t);
    }
    r.poisoned[i] = poisoned;
    r.any_visible[i] = any_visible;
    double sum = 0.0;
    if (row_max != kNegInf && !poisoned)
      for (std::int64_t j = 0; j < Lk; ++j) {
        row[j] = std::exp(row[j] - row_max);
        sum += row[j];
      }
    for (std::int64_t j = 0; j < Lk; ++j) row[j] = sum > 0.0 ? row[j] / sum : 0.0;
    r.lse[i] = poisoned ? std::numeric_limits<double>::quiet_NaN()
                        : (sum > 0.0 ? row_max + std::log(sum) : kNegInf);
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
        in.dout[i * Dv + d] =
            load_as_f32(grad->dout, grad->dout_dtype,
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
    if (pr.poisoned[i]) {
      std::fill(out + i * Dv, out + (i + 1) * Dv, std::numeric_limits<double>::quiet_NaN());
      continue;
    }
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
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  const Probabilities pr = probabilities(p, b, h, in);
  std::vector<double> dp(static_cast<std::size_t>(Lk));
  std::fill(dq, dq + Lq * D, 0.0);
  for (std::int64_t i = 0; i < Lq; ++i) {
    const double* prob = pr.p.data() + i * Lk;
    const double* g_out = in.dout.data() + i * Dv;
    // A poisoned row (or one whose dout is not finite) gives NaN to its dq and to the dk and
    // dv of every key it sees (docs/semantics.md).
    if (pr.any_visible[i] && (pr.poisoned[i] || !finite_row(g_out, Dv))) {
      std::fill(dq + i * D, dq + (i + 1) * D, kNaN);
      for (std::int64_t j = 0; j < Lk; ++j)
        if (pr.visible[i * Lk + j]) {
          std::fill(dk + j * D, dk + (j + 1) * D, kNaN);
          std::fill(dv + j * Dv, dv + (j + 1) * Dv, kNaN);
        }
      continue;
    }
    // With Z the keep mask: out = (P o Z / (1 - p)) V, so dV += (P o Z / (1 - p))^T dout and
    // dP = (dout V^T) o Z / (1 - p); then dS = P o (dP - rowsum(P o dP)). Keys this row does not
    // see take no part (their V may hold anything).
    double delta = 0.0;
    for (std::int64_t j = 0; j < Lk; ++j) {
      dp[j] = 0.0;
      if (!pr.visible[i * Lk + j]) continue;
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
      if (!pr.visible[i * Lk + j]) continue;
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
