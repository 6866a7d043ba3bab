// Non-finite inputs on the CPU backend, checked against the reference's rules
// (docs/semantics.md, "Non-finite values"): a key that no row may see contributes nothing
// whatever its K and V hold, and a NaN or Inf in a visible element makes exactly the rows that
// see it NaN (out and lse), and in the backward their dq and the dk, dv of every key they see.
//
// The poison goes into every masked-position class (beyond key_lengths, a boolean mask, the
// causal band in both alignments, a window, -inf in an additive mask) in full and in partial key
// blocks, and into random visible keys, queries and incoming gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "nonfinite_case.hpp"

namespace tileattn::test {
namespace {

class CpuNonFinite : public testing::TestWithParam<Case> {};

std::vector<CpuIsa> supported_isas() {
  std::vector<CpuIsa> isas;
  for (CpuIsa isa :
       {CpuIsa::amx_bf16, CpuIsa::avx512_bf16, CpuIsa::avx512, CpuIsa::avx2, CpuIsa::portable})
    if (isa_supported(isa)) isas.push_back(isa);
  return isas;
}

TEST_P(CpuNonFinite, ForwardMatchesReferenceRules) {
  TILEATTN_TRACE_SEED();
  const Case& c = GetParam();
  Rng rng = make_rng();
  for (Poison mode : {Poison::masked_keys, Poison::anywhere, Poison::values})
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      SCOPED_TRACE(std::string(to_string(mode)) + " " + to_string(dtype));
      Problem pb(c, dtype, rng);
      const HostTensor clean_out = pb.make_out(), clean_lse = pb.make_lse();
      if (mode == Poison::masked_keys)
        attention_forward(pb.args(clean_out, &clean_lse), {Backend::reference, 2});
      poison_inputs(pb, nullptr, mode, rng);
      const HostTensor ref_out = pb.make_out(), ref_lse = pb.make_lse();
      attention_forward(pb.args(ref_out, &ref_lse), {Backend::reference, 2});
      if (mode == Poison::masked_keys) {  // the oracle itself: poison behind masks changes nothing
        EXPECT_EQ(ref_out.bytes(), clean_out.bytes());
        EXPECT_EQ(ref_lse.bytes(), clean_lse.bytes());
      }
      const double tol = dtype == DType::f32 ? 1e-5 : 3e-2;
      for (CpuIsa isa : supported_isas()) {
        SCOPED_TRACE(to_string(isa));
        HostTensor out = pb.make_out(), lse = pb.make_lse();
        Context ctx;
        ctx.backend = Backend::cpu;
        ctx.threads = 2;
        ctx.cpu_isa = isa;
        attention_forward(pb.args(out, &lse), ctx);
        expect_matches(out.to_f32(), ref_out.to_f32(), tol, 1e-6, "out");
        expect_matches(lse.to_f32(), ref_lse.to_f32(), tol, 1e-4, "lse");
      }
    }
}

TEST_P(CpuNonFinite, BackwardMatchesReferenceRules) {
  TILEATTN_TRACE_SEED();
  const Case& c = GetParam();
  Rng rng = make_rng();
  for (Poison mode : {Poison::masked_keys, Poison::anywhere, Poison::values})
    for (DType dtype : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string(to_string(mode)) + " " + to_string(dtype));
      Problem pb(c, dtype, rng);
      HostTensor dout = HostTensor::operand(dtype, c.B, c.Lq, c.Hq, pb.Dv, c.layout);
      dout.fill_normal(rng);
      poison_inputs(pb, &dout, mode, rng);
      const auto gradients = [&](Backend backend, CpuIsa isa) {
        HostTensor out = pb.make_out(), lse = pb.make_lse();
        Context ctx;
        ctx.backend = backend;
        ctx.threads = 2;
        ctx.cpu_isa = isa;
        AttentionBackwardArgs g;
        static_cast<AttentionArgs&>(g) = pb.args(out, &lse);
        attention_forward(g, ctx);
        g.dout = dout.view();
        std::vector<HostTensor> grads = {
            HostTensor::operand(DType::f32, c.B, c.Lq, c.Hq, c.D, c.layout),
            HostTensor::operand(DType::f32, c.B, c.Lk, c.Hkv, c.D, c.layout),
            HostTensor::operand(DType::f32, c.B, c.Lk, c.Hkv, pb.Dv, c.layout)};
        for (HostTensor& t : grads) t.poison();
        g.dq = grads[0].view();
        g.dk = grads[1].view();
        g.dv = grads[2].view();
        attention_backward(g, ctx);
        return grads;
      };
      const std::vector<HostTensor> ref = gradients(Backend::reference, CpuIsa::best);
      const double tol = dtype == DType::f32 ? 1e-4 : 5e-2;
      for (CpuIsa isa : supported_isas()) {
        if (isa == CpuIsa::amx_bf16 || isa == CpuIsa::avx512_bf16) continue;  // same kernels
        SCOPED_TRACE(to_string(isa));
        const std::vector<HostTensor> got = gradients(Backend::cpu, isa);
        expect_matches(got[0].to_f32(), ref[0].to_f32(), tol, 1e-5, "dq");
        expect_matches(got[1].to_f32(), ref[1].to_f32(), tol, 1e-5, "dk");
        expect_matches(got[2].to_f32(), ref[2].to_f32(), tol, 1e-5, "dv");
      }
    }
}

INSTANTIATE_TEST_SUITE_P(All, CpuNonFinite, testing::ValuesIn(poison_cases().cases),
                         [](const testing::TestParamInfo<Case>& param_info) {
                           return param_info.param.name;
                         });

// Scores beyond f32's range: +inf (or NaN) makes the row NaN, below -FLT_MAX weighs 0 - the same
// on the reference and every CPU level.
TEST(CpuNonFinite, OverflowingScores) {
  TILEATTN_TRACE_SEED();
  // Lk 70: one key block with an edge (modified scores); Lk 600: the overflowing keys also in
  // interior blocks, whose raw scores go to the softmax unmodified.
  for (const std::int64_t Lk : {70, 600}) {
    SCOPED_TRACE("Lk " + std::to_string(Lk));
    Case c;
    c.Lq = 6, c.Lk = Lk, c.Hq = c.Hkv = 1, c.D = 4, c.out = OutDType::f32;
    Rng rng = make_rng();
    Problem pb(c, DType::f32, rng);
    // Row 0 overflows upwards on key 5, row 1 downwards: both poisoned. The other rows meet
    // scores near 1e20, large but finite.
    for (std::int64_t d = 0; d < c.D; ++d) {
      pb.q.set(at(0, 0, 0, d, c.Lq, 1, c.D), 1e20f);
      pb.k.set(at(0, 5, 0, d, c.Lk, 1, c.D), 1e20f);
      pb.q.set(at(0, 1, 0, d, c.Lq, 1, c.D), -1e20f);
    }
    const HostTensor ref_out = pb.make_out(), ref_lse = pb.make_lse();
    attention_forward(pb.args(ref_out, &ref_lse), {Backend::reference, 1});
    EXPECT_TRUE(std::isnan(ref_lse.get(0)));
    EXPECT_TRUE(std::isnan(ref_lse.get(1)));
    for (std::int64_t i = 2; i < c.Lq; ++i) EXPECT_TRUE(std::isfinite(ref_lse.get(i))) << i;
    for (CpuIsa isa : supported_isas()) {
      SCOPED_TRACE(to_string(isa));
      HostTensor out = pb.make_out(), lse = pb.make_lse();
      Context ctx;
      ctx.backend = Backend::cpu;
      ctx.cpu_isa = isa;
      attention_forward(pb.args(out, &lse), ctx);
      expect_matches(out.to_f32(), ref_out.to_f32(), 1e-5, 1e-6, "out");
      expect_matches(lse.to_f32(), ref_lse.to_f32(), 1e-5, 1e-4, "lse");
    }
  }
}

}  // namespace
}  // namespace tileattn::test
