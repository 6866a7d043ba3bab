// The CUDA backend's f32 path (f32 storage computed with f32 FMA products, src/cuda/f32/) against
// the double-precision reference: forward and backward on awkward shapes with every option, at
// f32 tolerances; the non-finite rules of docs/semantics.md with the CPU suite's canaries
// (tests/cpu/nonfinite_case.hpp); bitwise reproducibility; and the opt-in bf16 computation of
// f32 (Context::cuda_f32_via_bf16) at bf16 tolerances.
//
// Tolerances: the f32 path's relative L2 error measured 1e-7 to 7e-7 forward and backward on
// these cases (a CPU emulation of the kernels, every thread a std::thread; not yet on a GPU); the
// bars leave ~15x room and stay ~100x below the bf16 path's error, so a kernel that rounds
// anything to 16 bits fails them.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attention_case.hpp"
#include "cuda_calls.hpp"
#include "cuda_case.hpp"
#include "nonfinite_case.hpp"

namespace tileattn::test {
namespace {

// Forward: relative L2 error of out, and its largest error relative to max |ref|.
constexpr double kOutRelL2 = 1e-5, kOutMaxRel = 2e-5;
// lse: absolute error (natural log; |lse| reaches ~40 in these cases: 7.6e-6 measured at
// scale 1).
constexpr double kLseAbs = 5e-5;
// Backward: relative L2 error of dq, dk and dv; where the reference is all 0 (a single key:
// dP - delta cancels), the absolute L2 error (1.5e-5 measured), as tests/cuda's kErrorFloor.
constexpr double kGradRelL2 = 2e-5, kGradAbsL2 = 1e-4;
// The opt-in bf16 path must be visibly less accurate than the f32 one (it is the bf16 kernel).
constexpr double kBf16MinRelL2 = 1e-4;

std::vector<Case> f32_cases() {
  CaseList l;
  const auto add = [&](const std::string& name, const std::function<void(Case&)>& tweak) {
    l.add(name, tweak);
  };
  add("plain", [](Case& c) { c.B = 2, c.Lq = c.Lk = 128, c.Hq = c.Hkv = 3, c.D = 64; });
  add("everything", [](Case& c) {
    c.B = 2, c.Lq = 77, c.Lk = 140, c.Hq = 4, c.Hkv = 2, c.D = 72, c.Dv = 40, c.causal = true;
    c.window_left = 50, c.mask = MaskKind::additive_full, c.key_lengths = KeyLengths::i64;
    c.softcap = 8.0f, c.alibi = Alibi::batch_heads, c.dropout = 0.2f, c.layout = Layout::padded;
  });
  add("single_query_key", [](Case& c) { c.Lq = c.Lk = 1, c.Hq = c.Hkv = 4; });
  add("single_query", [](Case& c) { c.Lq = 1, c.Lk = 300, c.D = 128; });
  add("single_key", [](Case& c) { c.Lq = 130, c.Lk = 1, c.D = 40; });
  add("no_keys", [](Case& c) { c.Lq = 5, c.Lk = 0, c.D = 16; });
  add("no_queries", [](Case& c) { c.Lq = 0, c.Lk = 20, c.D = 16; });
  for (const std::int64_t L : {17, 65, 129, 257, 520})
    add("len_" + std::to_string(L),
        [L](Case& c) { c.Lq = c.Lk = L, c.Hq = 2, c.Hkv = 1, c.D = 64; });
  for (const std::int64_t D : {1, 3, 24, 40, 80, 96, 128, 160, 200, 256})
    add("dim_" + std::to_string(D), [D](Case& c) { c.Lq = 100, c.Lk = 150, c.D = D; });
  add("dv_lt_d", [](Case& c) { c.Lq = 70, c.Lk = 90, c.D = 128, c.Dv = 64; });
  add("dv_gt_d", [](Case& c) { c.Lq = 70, c.Lk = 90, c.D = 24, c.Dv = 200; });
  add("dv_odd", [](Case& c) { c.Lq = 70, c.Lk = 90, c.D = 33, c.Dv = 7; });
  add("causal_bottom_right", [](Case& c) { c.B = 2, c.Lq = c.Lk = 200, c.causal = true; });
  add("causal_top_left",
      [](Case& c) { c.Lq = c.Lk = 200, c.causal = true, c.alignment = Alignment::top_left; });
  add("causal_br_lq_gt_lk", [](Case& c) { c.Lq = 190, c.Lk = 70, c.causal = true; });
  add("causal_br_lq_lt_lk", [](Case& c) { c.Lq = 70, c.Lk = 230, c.causal = true; });
  add("causal_tl_lq_gt_lk",
      [](Case& c) { c.Lq = 190, c.Lk = 70, c.causal = true, c.alignment = Alignment::top_left; });
  add("causal_tl_lq_lt_lk",
      [](Case& c) { c.Lq = 70, c.Lk = 230, c.causal = true, c.alignment = Alignment::top_left; });
  add("window", [](Case& c) { c.Lq = 170, c.Lk = 190, c.window_left = 30, c.window_right = 5; });
  add("window_left_only", [](Case& c) { c.Lq = 170, c.Lk = 250, c.window_left = 70; });
  add("window_right_only", [](Case& c) { c.Lq = 120, c.Lk = 250, c.window_right = 20; });
  add("causal_window_d128",
      [](Case& c) { c.Lq = c.Lk = 300, c.D = 128, c.causal = true, c.window_left = 100; });
  add("mask_bool_2d", [](Case& c) { c.Lq = 80, c.Lk = 130, c.mask = MaskKind::bool_2d; });
  add("mask_bool_3d", [](Case& c) { c.Lq = 80, c.Lk = 130, c.mask = MaskKind::bool_3d; });
  add("mask_bool_batch",
      [](Case& c) { c.B = 2, c.Lq = 80, c.Lk = 130, c.mask = MaskKind::bool_batch; });
  add("mask_bool_full_gqa", [](Case& c) {
    c.B = 2, c.Lq = 80, c.Lk = 130, c.Hq = 3, c.Hkv = 1, c.mask = MaskKind::bool_full;
  });
  add("mask_bool_stride0", [](Case& c) { c.Lq = 80, c.Lk = 130, c.mask = MaskKind::bool_stride0; });
  add("mask_key_padding",
      [](Case& c) { c.B = 2, c.Lq = 80, c.Lk = 130, c.mask = MaskKind::bool_key_padding; });
  add("mask_additive_2d", [](Case& c) { c.Lq = 80, c.Lk = 130, c.mask = MaskKind::additive_2d; });
  add("mask_additive_full",
      [](Case& c) { c.B = 2, c.Lq = 80, c.Lk = 130, c.mask = MaskKind::additive_full; });
  add("key_lengths_causal_i32", [](Case& c) {
    c.B = 3, c.Lq = 90, c.Lk = 140, c.causal = true, c.key_lengths = KeyLengths::i32;
  });
  add("key_lengths_tl_i64", [](Case& c) {
    c.B = 3, c.Lq = 90, c.Lk = 140, c.causal = true, c.alignment = Alignment::top_left;
    c.key_lengths = KeyLengths::i64;
  });
  add("softcap", [](Case& c) { c.Lq = 100, c.Lk = 120, c.softcap = 5.0f, c.scale = 0.5f; });
  add("alibi_heads", [](Case& c) { c.Lq = c.Lk = 120, c.Hq = 4, c.alibi = Alibi::heads; });
  add("alibi_causal", [](Case& c) {
    c.B = 2, c.Lq = c.Lk = 120, c.Hq = 4, c.Hkv = 2, c.alibi = Alibi::batch_heads, c.causal = true;
  });
  add("scale_negative", [](Case& c) { c.Lq = c.Lk = 100, c.D = 64, c.scale = -0.3f; });
  add("scale_large", [](Case& c) { c.Lq = c.Lk = 100, c.D = 64, c.scale = 1.0f; });
  add("key_ramp", [](Case& c) { c.Lq = 100, c.Lk = 300, c.key_ramp = 3.0f; });
  add("dropout", [](Case& c) {
    c.B = 2, c.Lq = 140, c.Lk = 190, c.Hq = 4, c.Hkv = 2, c.D = 64, c.dropout = 0.3f;
  });
  add("dropout_causal_d256",
      [](Case& c) { c.Lq = c.Lk = 150, c.D = 256, c.causal = true, c.dropout = 0.5f; });
  add("mqa", [](Case& c) { c.B = 2, c.Lq = c.Lk = 130, c.Hq = 6, c.Hkv = 1; });
  add("layout_bhsd",
      [](Case& c) { c.B = 2, c.Lq = 70, c.Lk = 90, c.Hq = 4, c.Hkv = 2, c.layout = Layout::bhsd; });
  add("layout_padded_window", [](Case& c) {
    c.Lq = 170, c.Lk = 190, c.Hq = 6, c.Hkv = 2, c.D = 80, c.Dv = 48, c.window_left = 20,
    c.window_right = 5, c.layout = Layout::padded_bshd;
  });
  add("no_lse", [](Case& c) { c.Lq = c.Lk = 100, c.lse = false; });
  add("long_causal", [](Case& c) {
    c.Lq = c.Lk = 1000, c.Hq = 2, c.Hkv = 1, c.D = 128, c.causal = true, c.large = true;
  });
  return l.cases;
}

class CudaF32 : public testing::TestWithParam<Case> {};

TEST_P(CudaF32, ForwardMatchesReference) {
  TILEATTN_REQUIRE_CUDA();
  TILEATTN_TRACE_SEED();
  const Case& c = GetParam();
  Rng rng = make_rng();
  const Problem pb(c, DType::f32, rng);
  const HostTensor ref_out = HostTensor::contiguous(DType::f32, {c.B, c.Lq, c.Hq, pb.Dv});
  const HostTensor ref_lse = HostTensor::contiguous(DType::f32, {c.B, c.Hq, c.Lq});
  {
    AttentionArgs a = pb.args(ref_out, &ref_lse);
    attention_forward(a, {Backend::reference, 0});
  }
  HostTensor out, lse;
  cuda_forward(pb, false, out, lse);
  SCOPED_TRACE(describe(pb.args(out, nullptr)));
  EXPECT_TRUE(out.padding_intact()) << "out was written outside its logical elements";
  EXPECT_TRUE(lse.padding_intact()) << "lse was written outside its logical elements";
  const ErrorStats stats = compare(out.to_f32(), ref_out.to_f32());
  EXPECT_EQ(stats.nonfinite, 0) << stats.str();
  EXPECT_LE(stats.rel_l2, kOutRelL2) << stats.str();
  EXPECT_LE(stats.max_abs, kOutMaxRel * stats.ref_max + 1e-7) << stats.str();
  LseStats lse_stats;
  if (c.lse) {
    lse_stats = compare_lse(lse.to_f32(), ref_lse.to_f32());
    EXPECT_EQ(lse_stats.mismatched_inf, 0) << lse_stats.str();
    EXPECT_LE(lse_stats.max_abs, kLseAbs) << lse_stats.str();
  }
  std::cout << "[ stats ] cuda f32 forward " << c.name << " rel_l2 " << stats.rel_l2
            << " max_abs/max_ref " << stats.max_abs / std::max(stats.ref_max, 1e-30)
            << " lse_max_abs " << lse_stats.max_abs << "\n";
}

TEST_P(CudaF32, BackwardMatchesReference) {
  TILEATTN_REQUIRE_CUDA();
  TILEATTN_TRACE_SEED();
  const Case& c = GetParam();
  Rng rng = make_rng();
  Problem pb(c, DType::f32, rng);
  pb.c.lse = true;  // the backward needs it
  const HostTensor dout = random_dout(pb, rng);
  HostTensor out, lse;
  cuda_forward(pb, false, out, lse);  // out and lse as a GPU training step has them
  const Gradients ref = reference_backward(pb, dout);
  const Gradients got = cuda_backward(pb, out, lse, dout, false, false);
  SCOPED_TRACE(describe(pb.args(out, nullptr)));
  std::cout << "[ stats ] cuda f32 backward " << c.name;
  const std::pair<const char*, std::pair<const HostTensor*, const HostTensor*>> checks[] = {
      {"dq", {&got.dq, &ref.dq}}, {"dk", {&got.dk, &ref.dk}}, {"dv", {&got.dv, &ref.dv}}};
  for (const auto& [name, tensors] : checks) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(tensors.first->padding_intact()) << "written outside its logical elements";
    const ErrorStats stats = compare(tensors.first->to_f32(), tensors.second->to_f32());
    EXPECT_EQ(stats.nonfinite, 0) << stats.str();
    EXPECT_LE(stats.rel_l2, stats.ref_max > 0.0 ? kGradRelL2 : kGradAbsL2) << stats.str();
    std::cout << " " << name << " " << stats.rel_l2;
  }
  std::cout << "\n";
}

// Both modes give the same bits from run to run (the f32 backward has no atomics).
TEST_P(CudaF32, BackwardBitwiseReproducible) {
  TILEATTN_REQUIRE_CUDA();
  TILEATTN_TRACE_SEED();
  const Case& c = GetParam();
  if (c.Lq * c.Lk > 100000) GTEST_SKIP() << "small cases only";
  Rng rng = make_rng();
  Problem pb(c, DType::f32, rng);
  pb.c.lse = true;
  const HostTensor dout = random_dout(pb, rng);
  HostTensor out, lse;
  cuda_forward(pb, false, out, lse);
  const Gradients first = cuda_backward(pb, out, lse, dout, false, true);
  for (const bool deterministic : {true, false}) {
    const Gradients again = cuda_backward(pb, out, lse, dout, false, deterministic);
    EXPECT_EQ(again.dq.bytes(), first.dq.bytes());
    EXPECT_EQ(again.dk.bytes(), first.dk.bytes());
    EXPECT_EQ(again.dv.bytes(), first.dv.bytes());
  }
}

INSTANTIATE_TEST_SUITE_P(All, CudaF32, testing::ValuesIn(f32_cases()),
                         [](const testing::TestParamInfo<Case>& param_info) {
                           return param_info.param.name;
                         });

// The non-finite rules: poison in every masked-position class changes nothing, and poison at
// random visible keys, queries and incoming gradients makes exactly the reference's rows NaN.
class CudaF32NonFinite : public testing::TestWithParam<Case> {};

TEST_P(CudaF32NonFinite, ForwardMatchesReferenceRules) {
  TILEATTN_REQUIRE_CUDA();
  TILEATTN_TRACE_SEED();
  Rng rng = make_rng();
  for (Poison mode : {Poison::masked_keys, Poison::anywhere}) {
    SCOPED_TRACE(to_string(mode));
    Problem pb(GetParam(), DType::f32, rng);
    poison_inputs(pb, nullptr, mode, rng);
    const HostTensor ref_out = pb.make_out(), ref_lse = pb.make_lse();
    attention_forward(pb.args(ref_out, &ref_lse), {Backend::reference, 0});
    HostTensor out, lse;
    cuda_forward(pb, false, out, lse);
    expect_matches(out.to_f32(), ref_out.to_f32(), 1e-5, 1e-6, "out");
    expect_matches(lse.to_f32(), ref_lse.to_f32(), 0.0, 2e-5, "lse");
  }
}

TEST_P(CudaF32NonFinite, BackwardMatchesReferenceRules) {
  TILEATTN_REQUIRE_CUDA();
  TILEATTN_TRACE_SEED();
  Rng rng = make_rng();
  for (Poison mode : {Poison::masked_keys, Poison::anywhere}) {
    SCOPED_TRACE(to_string(mode));
    Problem pb(GetParam(), DType::f32, rng);
    HostTensor dout = random_dout(pb, rng);
    poison_inputs(pb, &dout, mode, rng);
    HostTensor out, lse;
    cuda_forward(pb, false, out, lse);
    const Gradients ref = reference_backward(pb, dout);
    const Gradients got = cuda_backward(pb, out, lse, dout, false, false);
    expect_matches(got.dq.to_f32(), ref.dq.to_f32(), 1e-4, 1e-5, "dq");
    expect_matches(got.dk.to_f32(), ref.dk.to_f32(), 1e-4, 1e-5, "dk");
    expect_matches(got.dv.to_f32(), ref.dv.to_f32(), 1e-4, 1e-5, "dv");
  }
}

INSTANTIATE_TEST_SUITE_P(All, CudaF32NonFinite, testing::ValuesIn(poison_cases().cases),
                         [](const testing::TestParamInfo<Case>& param_info) {
                           return param_info.param.name;
                         });

// Scores beyond f32's range: +inf or -inf from a finite q.k poisons the row (NaN), as on the
// reference; scores near 1e20 are ordinary softmax inputs.
TEST(CudaF32NonFiniteScores, OverflowingScores) {
  TILEATTN_REQUIRE_CUDA();
  TILEATTN_TRACE_SEED();
  for (const std::int64_t Lk : {70, 600}) {
    SCOPED_TRACE("Lk " + std::to_string(Lk));
    Case c;
    c.Lq = 6, c.Lk = Lk, c.Hq = c.Hkv = 1, c.D = 4, c.out = OutDType::f32;
    Rng rng = make_rng();
    Problem pb(c, DType::f32, rng);
    for (std::int64_t d = 0; d < c.D; ++d) {
      pb.q.set(at(0, 0, 0, d, c.Lq, 1, c.D), 1e20f);
      pb.k.set(at(0, 5, 0, d, c.Lk, 1, c.D), 1e20f);
      pb.q.set(at(0, 1, 0, d, c.Lq, 1, c.D), -1e20f);
    }
    const HostTensor ref_out = pb.make_out(), ref_lse = pb.make_lse();
    attention_forward(pb.args(ref_out, &ref_lse), {Backend::reference, 1});
    HostTensor out, lse;
    cuda_forward(pb, false, out, lse);
    EXPECT_TRUE(std::isnan(lse.get(0)));
    EXPECT_TRUE(std::isnan(lse.get(1)));
    expect_matches(out.to_f32(), ref_out.to_f32(), 1e-5, 1e-6, "out");
    expect_matches(lse.to_f32(), ref_lse.to_f32(), 1e-6, 1e-4, "lse");  // |lse| ~ 2e19
  }
}

// The opt-in: Context::cuda_f32_via_bf16 runs f32 storage on the bf16 tensor-core kernels, with
// bf16 accuracy (within 2x the naive bf16 computation's error, as tests/cuda/cuda_case.cpp
// checks the same kernels), measurably less accurate than the default.
class CudaF32ViaBf16 : public testing::TestWithParam<Case> {};

TEST_P(CudaF32ViaBf16, ForwardAndBackwardAtBf16Accuracy) {
  TILEATTN_REQUIRE_CUDA();
  TILEATTN_TRACE_SEED();
  const Case& c = GetParam();
  Rng rng = make_rng();
  Problem pb(c, DType::f32, rng);
  const HostTensor dout = random_dout(pb, rng);
  // The same inputs rounded to bf16 (the same seed draws the same values): the error bar.
  Rng rng16 = make_rng();
  Problem pb16(c, DType::bf16, rng16);
  const HostTensor dout16 = random_dout(pb16, rng16);

  const HostTensor ref_out = HostTensor::contiguous(DType::f32, {c.B, c.Lq, c.Hq, pb.Dv});
  attention_forward(pb.args(ref_out, nullptr), {Backend::reference, 0});
  HostTensor out16 = pb16.make_out(), lse16 = pb16.make_lse();
  const NaiveResult naive = naive_attention(pb16.args(out16, &lse16));
  HostTensor out, lse, out_f32, lse_f32;
  cuda_forward(pb, true, out, lse);
  cuda_forward(pb, false, out_f32, lse_f32);
  const ErrorStats stats = compare(out.to_f32(), ref_out.to_f32());
  const ErrorStats naive_stats = compare(naive.out, ref_out.to_f32());
  const ErrorStats f32_stats = compare(out_f32.to_f32(), ref_out.to_f32());
  EXPECT_EQ(stats.nonfinite, 0) << stats.str();
  EXPECT_LE(stats.rel_l2, std::min(kF32InputRelL2, 2.0 * naive_stats.rel_l2) + 1e-6)
      << "via bf16: " << stats.str() << "\nnaive bf16: " << naive_stats.str();
  EXPECT_GE(stats.rel_l2, kBf16MinRelL2) << "the opt-in did not take the bf16 kernels";
  EXPECT_LT(f32_stats.rel_l2, stats.rel_l2 / 100) << f32_stats.str();

  const Gradients ref = reference_backward(pb, dout);
  const Gradients got = cuda_backward(pb, out, lse, dout, true, false);
  HostTensor o16 = pb16.make_out(), l16 = pb16.make_lse();
  AttentionBackwardArgs naive_args;
  static_cast<AttentionArgs&>(naive_args) = pb16.args(o16, &l16);
  naive_args.dout = dout16.view();
  Gradients g16 = poisoned_gradients(pb16, DType::f32);
  naive_args.dq = g16.dq.view();
  naive_args.dk = g16.dk.view();
  naive_args.dv = g16.dv.view();
  const NaiveGradients naive_g = naive_attention_backward(naive_args);
  const struct {
    const char* name;
    const HostTensor& got;
    const HostTensor& ref;
    const std::vector<float>& naive;
  } checks[] = {{"dq", got.dq, ref.dq, naive_g.dq},
                {"dk", got.dk, ref.dk, naive_g.dk},
                {"dv", got.dv, ref.dv, naive_g.dv}};
  std::cout << "[ stats ] cuda f32 via bf16 " << c.name << " out " << stats.rel_l2 << " (f32 path "
            << f32_stats.rel_l2 << ", naive bf16 " << naive_stats.rel_l2 << ")";
  for (const auto& check : checks) {
    SCOPED_TRACE(check.name);
    const std::vector<float> reference = check.ref.to_f32();
    const ErrorStats g_stats = compare(check.got.to_f32(), reference);
    const ErrorStats n_stats = compare(check.naive, reference);
    EXPECT_EQ(g_stats.nonfinite, 0) << g_stats.str();
    EXPECT_LE(g_stats.rel_l2, 2.0 * n_stats.rel_l2 + 1e-4)
        << "via bf16: " << g_stats.str() << "\nnaive bf16: " << n_stats.str();
    EXPECT_GE(g_stats.rel_l2, kBf16MinRelL2) << "the opt-in did not take the bf16 kernels";
    std::cout << " " << check.name << " " << g_stats.rel_l2 << " (naive " << n_stats.rel_l2 << ")";
  }
  std::cout << "\n";
}

std::vector<Case> via_bf16_cases() {
  CaseList l;
  l.add("plain_d64", [](Case& c) { c.B = 2, c.Lq = c.Lk = 200, c.Hq = c.Hkv = 2, c.D = 64; });
  l.add("causal_gqa_d128",
        [](Case& c) { c.Lq = c.Lk = 150, c.Hq = 4, c.Hkv = 2, c.D = 128, c.causal = true; });
  l.add("options", [](Case& c) {
    c.B = 2, c.Lq = 77, c.Lk = 140, c.Hq = 4, c.Hkv = 2, c.D = 72, c.Dv = 40, c.causal = true;
    c.window_left = 50, c.mask = MaskKind::additive_full, c.key_lengths = KeyLengths::i64;
    c.softcap = 8.0f, c.alibi = Alibi::batch_heads, c.layout = Layout::padded;
  });
  return l.cases;
}

INSTANTIATE_TEST_SUITE_P(All, CudaF32ViaBf16, testing::ValuesIn(via_bf16_cases()),
                         [](const testing::TestParamInfo<Case>& param_info) {
                           return param_info.param.name;
                         });

}  // namespace
}  // namespace tileattn::test
