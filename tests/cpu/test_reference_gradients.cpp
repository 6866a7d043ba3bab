// Checks the oracle itself: the double-precision reference backward against central finite
// differences of the double-precision reference forward on tiny shapes, for every feature; and
// GQA's dk/dv against the sum over an equivalent multi-head problem with replicated k and v.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "api/validate.hpp"
#include "attention_case.hpp"
#include "reference/reference_math.hpp"

namespace tileattn::test {
namespace {

using detail::AttnParams;
using detail::HeadInputs;

std::vector<Case> tiny_cases() {
  std::vector<Case> cases;
  const auto add = [&](const std::string& name, const std::function<void(Case&)>& tweak) {
    Case c;
    c.name = name;
    c.B = 2, c.Lq = 4, c.Lk = 5, c.Hq = 2, c.Hkv = 1, c.D = 3, c.Dv = 2;
    tweak(c);
    cases.push_back(c);
  };
  add("plain", [](Case&) {});
  add("causal_bottom_right_lq_gt_lk", [](Case& c) { c.Lq = 6, c.Lk = 4, c.causal = true; });
  add("causal_top_left", [](Case& c) { c.causal = true, c.alignment = Alignment::top_left; });
  add("window", [](Case& c) { c.Lq = c.Lk = 6, c.window_left = 1, c.window_right = 1; });
  add("mask_bool", [](Case& c) { c.mask = MaskKind::bool_full; });
  add("mask_additive", [](Case& c) { c.mask = MaskKind::additive_full; });
  add("key_lengths", [](Case& c) { c.B = 3, c.key_lengths = KeyLengths::i32; });
  add("softcap", [](Case& c) { c.softcap = 0.7f, c.scale = 1.3f; });
  add("alibi", [](Case& c) { c.alibi = Alibi::batch_heads; });
  add("dropout", [](Case& c) { c.dropout = 0.4f; });
  add("scale_negative", [](Case& c) { c.scale = -0.8f; });
  add("everything", [](Case& c) {
    c.Lq = 6, c.Lk = 7, c.causal = true, c.window_left = 3, c.mask = MaskKind::additive_full,
    c.key_lengths = KeyLengths::i64, c.softcap = 1.5f, c.alibi = Alibi::heads, c.dropout = 0.3f;
  });
  return cases;
}

// sum(out * dout) of one head in double precision.
double head_loss(const AttnParams& p, std::int64_t b, std::int64_t h, const HeadInputs& in,
                 const std::vector<double>& dout) {
  std::vector<double> out(dout.size()), lse(static_cast<std::size_t>(p.len_q));
  detail::head_forward(p, b, h, in, out.data(), lse.data());
  double loss = 0.0;
  for (std::size_t n = 0; n < out.size(); ++n) loss += out[n] * dout[n];
  return loss;
}

class ReferenceGradients : public ::testing::TestWithParam<Case> {};

TEST_P(ReferenceGradients, MatchFiniteDifferences) {
  TILEATTN_TRACE_SEED();
  const Case& c = GetParam();
  Rng rng = make_rng();
  const Problem problem(c, DType::f32, rng);
  const HostTensor out = problem.make_out();
  const AttentionArgs args = problem.args(out, nullptr);
  SCOPED_TRACE(describe(args));
  const AttnParams p = detail::validate_forward(args);
  std::normal_distribution<double> normal(0.0, 1.0);
  constexpr double kStep = 1e-5;

  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads_q; ++h) {
      HeadInputs in = detail::load_head(p, b, h);
      in.dout.resize(static_cast<std::size_t>(p.len_q * p.dim_v));
      for (double& x : in.dout) x = normal(rng);
      std::vector<double> dq(in.q.size()), dk(in.k.size(), 0.0), dv(in.v.size(), 0.0);
      detail::head_backward(p, b, h, in, dq.data(), dk.data(), dv.data());

      const struct {
        const char* name;
        std::vector<double> HeadInputs::*tensor;
        const std::vector<double>& analytic;
      } grads[] = {
          {"dq", &HeadInputs::q, dq}, {"dk", &HeadInputs::k, dk}, {"dv", &HeadInputs::v, dv}};
      for (const auto& g : grads) {
        double max_error = 0.0, max_grad = 0.0;
        std::size_t worst = 0;
        std::vector<double>& x = in.*g.tensor;
        for (std::size_t n = 0; n < x.size(); ++n) {
          const double saved = x[n];
          x[n] = saved + kStep;
          const double up = head_loss(p, b, h, in, in.dout);
          x[n] = saved - kStep;
          const double down = head_loss(p, b, h, in, in.dout);
          x[n] = saved;
          const double numeric = (up - down) / (2.0 * kStep);
          max_grad = std::max(max_grad, std::abs(g.analytic[n]));
          if (std::abs(numeric - g.analytic[n]) > max_error) {
            max_error = std::abs(numeric - g.analytic[n]);
            worst = n;
          }
        }
        // Central differences: truncation ~ step^2, rounding ~ 1e-16 / step.
        EXPECT_LE(max_error, 1e-7 * (1.0 + max_grad))
            << g.name << " of (b " << b << ", h " << h << "): worst element " << worst
            << ", analytic " << g.analytic[worst] << ", max |grad| " << max_grad;
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Tiny, ReferenceGradients, ::testing::ValuesIn(tiny_cases()),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           return param.param.name;
                         });

// GQA: dk and dv of a kv head are the sums over its query heads. Checked against the same
// problem as multi-head attention with each kv head replicated for its group (both backends).
TEST(GqaGradients, EqualSumOverReplicatedHeads) {
  TILEATTN_TRACE_SEED();
  for (const Backend backend : {Backend::reference, Backend::cpu}) {
    Case c;
    c.B = 2, c.Lq = 30, c.Lk = 41, c.Hq = 6, c.Hkv = 2, c.D = 20, c.Dv = 12, c.causal = true;
    c.dropout = 0.2f;
    Rng rng = make_rng();
    const Problem gqa(c, DType::f32, rng);
    Case mha_case = c;
    mha_case.Hkv = c.Hq;
    Problem mha(mha_case, DType::f32, rng);
    const std::int64_t group = c.Hq / c.Hkv;
    for (std::int64_t n = 0; n < mha.q.numel(); ++n) mha.q.set(n, gqa.q.get(n));
    for (std::int64_t n = 0; n < mha.k.numel(); ++n) {  // logical [B, Lk, Hq, D]
      const std::int64_t d = n % c.D, h = n / c.D % c.Hq, rest = n / (c.D * c.Hq);
      mha.k.set(n, gqa.k.get((rest * c.Hkv + h / group) * c.D + d));
    }
    for (std::int64_t n = 0; n < mha.v.numel(); ++n) {
      const std::int64_t d = n % c.Dv, h = n / c.Dv % c.Hq, rest = n / (c.Dv * c.Hq);
      mha.v.set(n, gqa.v.get((rest * c.Hkv + h / group) * c.Dv + d));
    }
    mha.dropout_seed = gqa.dropout_seed, mha.dropout_offset = gqa.dropout_offset;

    const HostTensor dout = HostTensor::contiguous(DType::f32, {c.B, c.Lq, c.Hq, c.Dv});
    HostTensor dout_filled = dout;
    dout_filled.fill_normal(rng);
    const auto gradients = [&](const Problem& prob, std::int64_t hkv) {
      HostTensor out = HostTensor::contiguous(DType::f32, {c.B, c.Lq, c.Hq, c.Dv});
      HostTensor lse = HostTensor::contiguous(DType::f32, {c.B, c.Hq, c.Lq});
      attention_forward(prob.args(out, &lse), {backend, 2});
      std::vector<HostTensor> g = {HostTensor::contiguous(DType::f32, {c.B, c.Lq, c.Hq, c.D}),
                                   HostTensor::contiguous(DType::f32, {c.B, c.Lk, hkv, c.D}),
                                   HostTensor::contiguous(DType::f32, {c.B, c.Lk, hkv, c.Dv})};
      AttentionBackwardArgs a;
      static_cast<AttentionArgs&>(a) = prob.args(out, &lse);
      a.dout = dout_filled.view();
      a.dq = g[0].view(), a.dk = g[1].view(), a.dv = g[2].view();
      attention_backward(a, {backend, 2});
      return g;
    };
    const std::vector<HostTensor> g = gradients(gqa, c.Hkv), m = gradients(mha, c.Hq);
    EXPECT_LE(compare(g[0].to_f32(), m[0].to_f32()).rel_l2, 1e-6) << "dq, " << to_string(backend);
    for (int t = 1; t < 3; ++t) {
      const std::int64_t width = t == 1 ? c.D : c.Dv;
      std::vector<float> summed(static_cast<std::size_t>(g[t].numel()), 0.0f);
      const std::vector<float> per_head = m[t].to_f32();
      for (std::size_t n = 0; n < per_head.size(); ++n) {  // [B, Lk, Hq, width]
        const std::size_t d = n % width, h = n / width % c.Hq, rest = n / (width * c.Hq);
        summed[(rest * c.Hkv + h / group) * width + d] += per_head[n];
      }
      const ErrorStats e = compare(g[t].to_f32(), summed);
      EXPECT_LE(e.rel_l2, 1e-6) << (t == 1 ? "dk" : "dv") << ", " << to_string(backend) << ": "
                                << e.str();
    }
  }
}

}  // namespace
}  // namespace tileattn::test
