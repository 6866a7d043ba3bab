// The CPU flash backward (Backend::cpu) against the double-precision reference backward, for
// the f32 kernel paths (avx512, avx2, portable) x storage dtype x feature case, in both modes;
// and determinism. Paths the machine lacks are skipped.
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "backward_case.hpp"

namespace tileattn::test {
namespace {

std::vector<Case> backward_cases() {
  CaseList list;
  const auto add = [&](const std::string& name, const std::function<void(Case&)>& tweak) {
    list.add(name, tweak);
  };
  add("plain", [](Case& c) { c.B = 2, c.Lq = c.Lk = 64, c.Hq = c.Hkv = 3, c.D = 64; });
  add("single_query_key", [](Case& c) { c.Lq = c.Lk = 1, c.Hq = c.Hkv = 4; });
  add("single_query", [](Case& c) { c.Lq = 1, c.Lk = 200, c.D = 128; });
  add("single_key", [](Case& c) { c.Lq = 63, c.Lk = 1, c.D = 40; });
  add("no_keys", [](Case& c) { c.Lq = 5, c.Lk = 0, c.D = 16; });
  add("no_queries", [](Case& c) { c.Lq = 0, c.Lk = 20, c.D = 16; });
  for (const std::int64_t L : {17, 49, 95, 130, 257})
    add("len_" + std::to_string(L),
        [L](Case& c) { c.Lq = c.Lk = L, c.Hq = 2, c.Hkv = 1, c.D = 48, c.large = L > 200; });
  for (const std::int64_t D : {1, 3, 24, 80, 96, 128, 200, 256})
    add("dim_" + std::to_string(D), [D](Case& c) { c.Lq = 33, c.Lk = 70, c.D = D; });
  add("dv_lt_d", [](Case& c) { c.Lq = 40, c.Lk = 50, c.D = 128, c.Dv = 64; });
  add("dv_gt_d", [](Case& c) { c.Lq = 40, c.Lk = 50, c.D = 24, c.Dv = 200; });
  add("dv_odd", [](Case& c) { c.Lq = 19, c.Lk = 37, c.D = 64, c.Dv = 3; });

  add("causal_bottom_right", [](Case& c) { c.B = 2, c.Lq = c.Lk = 100, c.causal = true; });
  add("causal_top_left",
      [](Case& c) { c.Lq = c.Lk = 100, c.causal = true, c.alignment = Alignment::top_left; });
  add("causal_br_lq_gt_lk", [](Case& c) { c.Lq = 90, c.Lk = 33, c.causal = true; });
  add("causal_br_lq_lt_lk", [](Case& c) { c.Lq = 33, c.Lk = 130, c.causal = true; });
  add("causal_tl_lq_gt_lk",
      [](Case& c) { c.Lq = 90, c.Lk = 33, c.causal = true, c.alignment = Alignment::top_left; });
  add("causal_tl_lq_lt_lk",
      [](Case& c) { c.Lq = 33, c.Lk = 130, c.causal = true, c.alignment = Alignment::top_left; });
  add("window", [](Case& c) { c.Lq = 70, c.Lk = 90, c.window_left = 10, c.window_right = 5; });
  add("window_left_only", [](Case& c) { c.Lq = 70, c.Lk = 150, c.window_left = 40; });
  add("window_top_left", [](Case& c) {
    c.Lq = c.Lk = 80, c.window_left = 10, c.window_right = 3, c.alignment = Alignment::top_left;
  });
  add("causal_window", [](Case& c) { c.Lq = c.Lk = 120, c.causal = true, c.window_left = 20; });
  add("window_lq_gt_lk",
      [](Case& c) { c.Lq = 80, c.Lk = 30, c.window_left = 5, c.window_right = 2; });

  add("mask_bool_2d", [](Case& c) { c.B = 2, c.Lq = 40, c.Lk = 70, c.mask = MaskKind::bool_2d; });
  add("mask_bool_full", [](Case& c) {
    c.B = 2, c.Lq = 40, c.Lk = 70, c.Hq = 3, c.Hkv = 1, c.mask = MaskKind::bool_full;
  });
  add("mask_bool_stride0",
      [](Case& c) { c.B = 2, c.Lq = 40, c.Lk = 70, c.mask = MaskKind::bool_stride0; });
  add("mask_key_padding",
      [](Case& c) { c.B = 2, c.Lq = 40, c.Lk = 70, c.mask = MaskKind::bool_key_padding; });
  add("mask_additive_2d", [](Case& c) { c.Lq = 40, c.Lk = 70, c.mask = MaskKind::additive_2d; });
  add("mask_additive_full", [](Case& c) {
    c.B = 2, c.Lq = 40, c.Lk = 70, c.Hq = 4, c.Hkv = 2, c.mask = MaskKind::additive_full;
  });

  add("key_lengths_i32",
      [](Case& c) { c.B = 3, c.Lq = 30, c.Lk = 77, c.key_lengths = KeyLengths::i32; });
  add("key_lengths_causal_i64", [](Case& c) {
    c.B = 3, c.Lq = 45, c.Lk = 60, c.causal = true, c.key_lengths = KeyLengths::i64;
  });
  add("softcap", [](Case& c) { c.Lq = 50, c.Lk = 60, c.softcap = 5.0f, c.scale = 0.5f; });
  add("softcap_small", [](Case& c) { c.Lq = c.Lk = 40, c.softcap = 0.5f, c.causal = true; });
  add("softcap_huge", [](Case& c) { c.Lq = 23, c.Lk = 46, c.softcap = 1e5f, c.causal = true; });
  add("alibi_heads",
      [](Case& c) { c.Lq = 60, c.Lk = 90, c.Hq = 4, c.Hkv = 2, c.alibi = Alibi::heads; });
  add("alibi_batch_heads_causal", [](Case& c) {
    c.B = 2, c.Lq = c.Lk = 60, c.Hq = 2, c.Hkv = 2, c.alibi = Alibi::batch_heads, c.causal = true;
  });
  add("scale_negative", [](Case& c) { c.Lq = c.Lk = 50, c.D = 64, c.scale = -0.3f; });
  add("dropout",
      [](Case& c) { c.B = 2, c.Lq = 70, c.Lk = 90, c.Hq = 4, c.Hkv = 2, c.dropout = 0.2f; });
  add("dropout_causal_high",
      [](Case& c) { c.Lq = c.Lk = 100, c.causal = true, c.dropout = 0.75f; });

  add("gqa_2", [](Case& c) { c.B = 2, c.Lq = c.Lk = 70, c.Hq = 4, c.Hkv = 2; });
  add("gqa_4", [](Case& c) { c.B = 2, c.Lq = c.Lk = 40, c.Hq = 8, c.Hkv = 2; });
  add("mqa", [](Case& c) { c.B = 2, c.Lq = c.Lk = 70, c.Hq = 6, c.Hkv = 1; });
  add("layout_bhsd",
      [](Case& c) { c.B = 2, c.Lq = 33, c.Lk = 45, c.Hq = 4, c.Hkv = 2, c.layout = Layout::bhsd; });
  add("layout_padded", [](Case& c) {
    c.B = 2, c.Lq = 33, c.Lk = 45, c.Hq = 4, c.Hkv = 2, c.D = 40, c.layout = Layout::padded;
  });
  add("layout_padded_bshd_window", [](Case& c) {
    c.Lq = 70, c.Lk = 90, c.Hq = 6, c.Hkv = 2, c.D = 80, c.Dv = 48, c.window_left = 20,
    c.window_right = 5, c.layout = Layout::padded_bshd;
  });
  add("everything", [](Case& c) {
    c.B = 3, c.Lq = 47, c.Lk = 83, c.Hq = 4, c.Hkv = 2, c.D = 72, c.Dv = 40, c.causal = true,
    c.window_left = 30, c.mask = MaskKind::additive_full, c.key_lengths = KeyLengths::i64,
    c.softcap = 8.0f, c.alibi = Alibi::batch_heads, c.dropout = 0.1f, c.layout = Layout::padded;
  });
  add("threads_1", [](Case& c) { c.B = 2, c.Lq = c.Lk = 100, c.threads = 1; });
  add("threads_3_causal",
      [](Case& c) { c.Lq = c.Lk = 150, c.Hq = 4, c.Hkv = 1, c.threads = 3, c.causal = true; });
  add("long_causal", [](Case& c) {
    c.Lq = c.Lk = 384, c.Hq = 2, c.Hkv = 1, c.D = 128, c.causal = true, c.large = true;
  });
  add("long_cross_window", [](Case& c) {
    c.Lq = 301, c.Lk = 517, c.D = 96, c.window_left = 100, c.window_right = 40, c.large = true;
  });
  return list.cases;
}

using Param = std::tuple<CpuIsa, DType, bool, Case>;

class CpuBackward : public ::testing::TestWithParam<Param> {};

TEST_P(CpuBackward, MatchesReference) {
  const auto& [isa, dtype, deterministic, c] = GetParam();
  if (!isa_supported(isa)) GTEST_SKIP() << to_string(isa) << " is not supported by this CPU";
  TILEATTN_TRACE_SEED();
  run_backward_case(c, dtype, isa, deterministic);
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const auto& [isa, dtype, deterministic, c] = info.param;
  return std::string(to_string(isa)) + "_" + to_string(dtype) +
         (deterministic ? "_deterministic_" : "_") + c.name;
}

INSTANTIATE_TEST_SUITE_P(
    All, CpuBackward,
    ::testing::Combine(::testing::Values(CpuIsa::avx512, CpuIsa::avx2, CpuIsa::portable),
                       ::testing::Values(DType::f32, DType::f16, DType::bf16), ::testing::Bool(),
                       ::testing::ValuesIn(backward_cases())),
    param_name);

// ---- Determinism ------------------------------------------------------------------------------

Case determinism_case(bool causal) {
  Case c;
  c.name = causal ? "causal" : "plain";
  c.B = 2, c.Lq = 200, c.Lk = 230, c.Hq = 4, c.Hkv = 2, c.D = 64, c.causal = causal;
  c.dropout = 0.1f;
  return c;
}

std::vector<std::uint8_t> concat(const BackwardProblem::Gradients& g, bool dq, bool dkv) {
  std::vector<std::uint8_t> bytes;
  if (dq) bytes = g.dq.bytes();
  if (dkv) {
    bytes.insert(bytes.end(), g.dk.bytes().begin(), g.dk.bytes().end());
    bytes.insert(bytes.end(), g.dv.bytes().begin(), g.dv.bytes().end());
  }
  return bytes;
}

// deterministic = true: the same bits from run to run and for 1, 2, 3 and 5 threads.
TEST(CpuBackwardDeterminism, IdenticalBitsForAnyThreadCount) {
  TILEATTN_TRACE_SEED();
  for (const bool causal : {false, true}) {
    Rng rng = make_rng();
    const BackwardProblem bp(determinism_case(causal), DType::f32, CpuIsa::best, rng);
    std::vector<std::uint8_t> first;
    for (const int threads : {2, 2, 1, 3, 5}) {
      const BackwardProblem::Gradients g = bp.make_gradients();
      attention_backward(bp.args(g, true), {Backend::cpu, threads});
      const std::vector<std::uint8_t> bytes = concat(g, true, true);
      if (first.empty())
        first = bytes;
      else
        EXPECT_TRUE(bytes == first) << "causal " << causal << ", " << threads
                                    << " threads: gradients differ from the first run";
    }
  }
}

// deterministic = false still gives dk and dv identical bits (each key block has one owner that
// visits the query tiles in a fixed order); dq may differ only in rounding.
TEST(CpuBackwardDeterminism, KeyGradientsAlwaysDeterministic) {
  TILEATTN_TRACE_SEED();
  Rng rng = make_rng();
  const BackwardProblem bp(determinism_case(true), DType::f32, CpuIsa::best, rng);
  std::vector<std::uint8_t> first;
  std::vector<float> first_dq;
  for (const int threads : {2, 2, 3, 1}) {
    const BackwardProblem::Gradients g = bp.make_gradients();
    attention_backward(bp.args(g, false), {Backend::cpu, threads});
    const std::vector<std::uint8_t> bytes = concat(g, false, true);
    if (first.empty()) {
      first = bytes;
      first_dq = g.dq.to_f32();
      continue;
    }
    EXPECT_TRUE(bytes == first) << threads << " threads: dk/dv differ from the first run";
    const ErrorStats dq = compare(g.dq.to_f32(), first_dq);
    EXPECT_LE(dq.rel_l2, 1e-6) << dq.str();
  }
}

// The backward keeps its packed buffers per calling thread across calls: a call after a larger
// one with other head dims, lengths and group size (stale contents everywhere) gives the same
// bits as the same call in a fresh thread (fresh buffers).
TEST(CpuBackwardBuffers, ReuseAcrossCallsChangesNoBits) {
  TILEATTN_TRACE_SEED();
  Case large;
  large.name = "large";
  large.B = 2, large.Lq = 150, large.Lk = 260, large.Hq = 4, large.Hkv = 2, large.D = 72;
  Case small;
  small.name = "small";
  small.B = 1, small.Lq = 70, small.Lk = 90, small.Hq = 3, small.Hkv = 3, small.D = 40,
  small.Dv = 24, small.causal = true;
  Rng rng = make_rng();
  const BackwardProblem large_problem(large, DType::f32, CpuIsa::best, rng);
  const BackwardProblem small_problem(small, DType::f32, CpuIsa::best, rng);
  for (const bool deterministic : {false, true}) {
    const BackwardProblem::Gradients fresh = small_problem.make_gradients();
    const BackwardProblem::Gradients reused = small_problem.make_gradients();
    const BackwardProblem::Gradients large_grads = large_problem.make_gradients();
    std::thread([&] {
      attention_backward(small_problem.args(fresh, deterministic), {Backend::cpu, 2});
    }).join();
    std::thread([&] {
      attention_backward(large_problem.args(large_grads, deterministic), {Backend::cpu, 2});
      attention_backward(small_problem.args(reused, deterministic), {Backend::cpu, 2});
    }).join();
    // (Without deterministic mode dq's partial sums meet in a run-dependent order: dq may
    // differ in rounding only, as in KeyGradientsAlwaysDeterministic.)
    EXPECT_TRUE(concat(reused, deterministic, true) == concat(fresh, deterministic, true))
        << "deterministic " << deterministic << ": a call after a larger one differs";
    const ErrorStats dq = compare(reused.dq.to_f32(), fresh.dq.to_f32());
    EXPECT_LE(dq.rel_l2, 1e-6) << dq.str();
  }
}

}  // namespace
}  // namespace tileattn::test
