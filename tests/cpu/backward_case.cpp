#include "backward_case.hpp"

#include <iostream>

namespace tileattn::test {
namespace {

// f32 storage: the flash gradients must match the double-precision reference to this rel-L2
// error (the forward's f32 out and lse enter through delta and P).
constexpr double kF32RelL2 = 2e-5;
// 16-bit storage (FlashAttention's rule): error <= 2 x the naive same-precision error + epsilon,
// for the kernel's own error (delta from an exact out). With the forward's 16-bit out, delta =
// rowsum(dO o O) also carries out's rounding (FlashAttention's algorithm does the same; when Dv
// is tiny it can dominate): that call is bounded by the naive backward that takes delta from the
// same rounded out.
constexpr double kNaiveFactor = 2.0, kRelL2Epsilon = 1e-6;

}  // namespace

BackwardProblem::BackwardProblem(const Case& c, DType dtype, CpuIsa isa, Rng& rng)
    : problem(c, dtype, rng),
      out(problem.make_out()),
      lse(HostTensor::lse(c.B, c.Hq, c.Lq, c.layout)),
      dout(HostTensor::operand(problem.out_dtype, c.B, c.Lq, c.Hq, problem.Dv, c.layout)) {
  lse.poison();
  Context ctx;
  ctx.backend = Backend::cpu;
  ctx.threads = c.threads;
  ctx.cpu_isa = isa;
  attention_forward(problem.args(out, &lse), ctx);
  dout.fill_normal(rng);
}

BackwardProblem::Gradients BackwardProblem::make_gradients() const {
  return make_gradients(problem.dtype);
}

BackwardProblem::Gradients BackwardProblem::make_gradients(DType gradient_dtype) const {
  return poisoned_gradients(problem, gradient_dtype);
}

AttentionBackwardArgs BackwardProblem::args(const Gradients& g, bool deterministic) const {
  return backward_args(problem, out, lse, dout, g, deterministic);
}

Gradients poisoned_gradients(const Problem& pb, DType dtype) {
  const Case& c = pb.c;
  Gradients g{HostTensor::operand(dtype, c.B, c.Lq, c.Hq, c.D, c.layout),
              HostTensor::operand(dtype, c.B, c.Lk, c.Hkv, c.D, c.layout),
              HostTensor::operand(dtype, c.B, c.Lk, c.Hkv, pb.Dv, c.layout)};
  g.dq.poison();
  g.dk.poison();
  g.dv.poison();
  return g;
}

AttentionBackwardArgs backward_args(const Problem& pb, const HostTensor& out, const HostTensor& lse,
                                    const HostTensor& dout, const Gradients& g,
                                    bool deterministic) {
  AttentionBackwardArgs a;
  static_cast<AttentionArgs&>(a) = pb.args(out, &lse);
  a.dout = dout.view();
  a.dq = g.dq.view();
  a.dk = g.dk.view();
  a.dv = g.dv.view();
  a.deterministic = deterministic;
  return a;
}

GradientResult run_backward_case(const Case& c, DType dtype, CpuIsa isa, bool deterministic) {
  Rng rng = make_rng();
  const BackwardProblem bp(c, dtype, isa, rng);
  const Problem& problem = bp.problem;
  const std::int64_t Dv = problem.Dv;
  GradientResult result;

  // The oracle: double precision, f32 gradients.
  BackwardProblem::Gradients ref{HostTensor::contiguous(DType::f32, {c.B, c.Lq, c.Hq, c.D}),
                                 HostTensor::contiguous(DType::f32, {c.B, c.Lk, c.Hkv, c.D}),
                                 HostTensor::contiguous(DType::f32, {c.B, c.Lk, c.Hkv, Dv})};
  attention_backward(bp.args(ref, false), {Backend::reference, 2});

  const BackwardProblem::Gradients grads = bp.make_gradients();
  const AttentionBackwardArgs args = bp.args(grads, deterministic);
  SCOPED_TRACE(describe(args));
  const NaiveGradients naive = naive_attention_backward(args);
  // (Only the 16-bit bounds use it; f32 storage is bounded against the reference alone.)
  const NaiveGradients naive_given_out =
      dtype == DType::f32 ? NaiveGradients{}
                          : naive_attention_backward(args, NaiveDelta::given_out);

  const std::vector<std::uint8_t> inputs[] = {problem.q.bytes(), problem.k.bytes(),
                                              problem.v.bytes(), bp.out.bytes(),
                                              bp.lse.bytes(),    bp.dout.bytes()};
  Context ctx;
  ctx.backend = Backend::cpu;
  ctx.threads = c.threads;
  ctx.cpu_isa = isa;
  attention_backward(args, ctx);

  // The same backward with out exact (the reference forward's, f32): the kernel's own error.
  const bool rounded_out = problem.out_dtype != DType::f32;
  BackwardProblem::Gradients own = bp.make_gradients();
  if (rounded_out) {
    const HostTensor exact_out = HostTensor::contiguous(DType::f32, {c.B, c.Lq, c.Hq, Dv});
    AttentionBackwardArgs exact = bp.args(own, deterministic);
    exact.out = exact_out.view();
    exact.lse = {};
    attention_forward(exact, {Backend::reference, 2});
    exact.lse = bp.lse.view();
    attention_backward(exact, ctx);
  }

  const HostTensor* after[] = {&problem.q, &problem.k, &problem.v, &bp.out, &bp.lse, &bp.dout};
  const char* names[] = {"q", "k", "v", "out", "lse", "dout"};
  for (int n = 0; n < 6; ++n)
    EXPECT_EQ(after[n]->bytes(), inputs[n]) << names[n] << " was modified";

  const struct {
    const char* name;
    const HostTensor& got;
    const HostTensor& own;
    const HostTensor& ref;
    const std::vector<float>& naive;
    const std::vector<float>& naive_given_out;
    ErrorStats& stats;
    ErrorStats& naive_stats;
  } checks[] = {
      {"dq", grads.dq, own.dq, ref.dq, naive.dq, naive_given_out.dq, result.dq, result.naive_dq},
      {"dk", grads.dk, own.dk, ref.dk, naive.dk, naive_given_out.dk, result.dk, result.naive_dk},
      {"dv", grads.dv, own.dv, ref.dv, naive.dv, naive_given_out.dv, result.dv, result.naive_dv}};
  double given_out_naive_rel_l2[3] = {0.0, 0.0, 0.0};
  double own_rel_l2[3] = {0.0, 0.0, 0.0};
  int index = 0;
  for (const auto& check : checks) {
    SCOPED_TRACE(check.name);
    EXPECT_TRUE(check.got.padding_intact()) << "written outside its logical elements";
    const std::vector<float> reference = check.ref.to_f32();
    check.stats = compare(check.got.to_f32(), reference);
    check.naive_stats = compare(check.naive, reference);
    EXPECT_EQ(check.stats.nonfinite, 0)
        << "NaN/inf (poison left unwritten?) where the reference is finite; " << check.stats.str();
    if (dtype == DType::f32) {
      EXPECT_LE(check.stats.rel_l2, kF32RelL2) << check.stats.str();
    } else {
      const ErrorStats own_stats =
          rounded_out ? compare(check.own.to_f32(), reference) : check.stats;
      own_rel_l2[index] = own_stats.rel_l2;
      EXPECT_EQ(own_stats.nonfinite, 0) << own_stats.str();
      EXPECT_LE(own_stats.rel_l2, kNaiveFactor * check.naive_stats.rel_l2 + kRelL2Epsilon)
          << "kernel (exact out): " << own_stats.str()
          << "\nnaive same-precision: " << check.naive_stats.str();
      const ErrorStats given_out_stats = compare(check.naive_given_out, reference);
      given_out_naive_rel_l2[index] = given_out_stats.rel_l2;
      EXPECT_LE(check.stats.rel_l2, kNaiveFactor * given_out_stats.rel_l2 + kRelL2Epsilon)
          << "kernel (the forward's 16-bit out): " << check.stats.str()
          << "\nnaive same-precision, delta from the same out: " << given_out_stats.str();
    }
    ++index;
  }
  std::cout << "[ stats ] backward " << to_string(isa) << " " << to_string(dtype) << " " << c.name
            << (deterministic ? " deterministic" : "") << " rel_l2 dq " << result.dq.rel_l2
            << " dk " << result.dk.rel_l2 << " dv " << result.dv.rel_l2 << " naive dq "
            << result.naive_dq.rel_l2 << " dk " << result.naive_dk.rel_l2 << " dv "
            << result.naive_dv.rel_l2;
  if (rounded_out)
    std::cout << " exact-out dq " << own_rel_l2[0] << " dk " << own_rel_l2[1] << " dv "
              << own_rel_l2[2] << " naive-given-out dq " << given_out_naive_rel_l2[0] << " dk "
              << given_out_naive_rel_l2[1] << " dv " << given_out_naive_rel_l2[2];
  std::cout << "\n";
  return result;
}

}  // namespace tileattn::test
