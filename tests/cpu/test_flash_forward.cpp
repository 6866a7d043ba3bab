// The CPU flash forward (Backend::cpu) against the double-precision reference, for every CPU
// instruction-set path x storage dtype x feature case. Paths the machine lacks are skipped.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "attention_case.hpp"

namespace tileattn::test {
namespace {

std::vector<Case> all_cases() {
  CaseList list;
  const auto add = [&](const std::string& name, const std::function<void(Case&)>& tweak) {
    list.add(name, tweak);
  };
  // Plain attention; shapes that are multiples of nothing.
  add("plain", [](Case& c) { c.B = 2, c.Lq = c.Lk = 64, c.Hq = c.Hkv = 3, c.D = 64; });
  add("plain_no_lse", [](Case& c) { c.Lq = c.Lk = 65, c.D = 64, c.lse = false; });
  add("single_query_key", [](Case& c) { c.Lq = c.Lk = 1, c.Hq = c.Hkv = 4; });
  add("single_query", [](Case& c) { c.Lq = 1, c.Lk = 200, c.D = 128; });
  add("single_key", [](Case& c) { c.Lq = 63, c.Lk = 1, c.D = 40; });
  add("no_keys", [](Case& c) { c.Lq = 5, c.Lk = 0, c.D = 16; });
  for (const std::int64_t L : {3, 17, 63, 65, 127, 129, 200, 257}) {
    add("len_" + std::to_string(L),
        [L](Case& c) { c.Lq = c.Lk = L, c.Hq = 2, c.Hkv = 1, c.D = 48, c.large = L > 200; });
  }
  for (const std::int64_t D : {1, 3, 24, 40, 72, 80, 96, 100, 112, 160, 200, 256}) {
    add("dim_" + std::to_string(D), [D](Case& c) { c.Lq = 33, c.Lk = 70, c.D = D; });
  }
  add("dv_lt_d", [](Case& c) { c.Lq = 40, c.Lk = 50, c.D = 128, c.Dv = 64; });
  add("dv_gt_d", [](Case& c) { c.Lq = 40, c.Lk = 50, c.D = 24, c.Dv = 200; });
  add("dv_odd", [](Case& c) { c.Lq = 19, c.Lk = 37, c.D = 64, c.Dv = 3; });

  // Causal masking.
  add("causal_bottom_right", [](Case& c) { c.B = 2, c.Lq = c.Lk = 100, c.causal = true; });
  add("causal_top_left",
      [](Case& c) { c.Lq = c.Lk = 100, c.causal = true, c.alignment = Alignment::top_left; });
  add("causal_br_lq_gt_lk", [](Case& c) {  // rows i < Lq - Lk see no key: out 0, lse -inf
    c.Lq = 90, c.Lk = 33, c.causal = true;
  });
  add("causal_br_lq_lt_lk", [](Case& c) { c.Lq = 33, c.Lk = 130, c.causal = true; });
  add("causal_tl_lq_gt_lk",
      [](Case& c) { c.Lq = 90, c.Lk = 33, c.causal = true, c.alignment = Alignment::top_left; });
  add("causal_tl_lq_lt_lk",
      [](Case& c) { c.Lq = 33, c.Lk = 130, c.causal = true, c.alignment = Alignment::top_left; });
  add("cross_lq_lt_lk", [](Case& c) { c.Lq = 17, c.Lk = 150, c.D = 80; });
  add("cross_lq_gt_lk", [](Case& c) { c.Lq = 150, c.Lk = 17, c.D = 80; });

  // Sliding windows (left, right), one-sided, and combined with causal.
  const std::int64_t windows[][2] = {{0, 0}, {4, 4}, {16, 0}, {0, 16}, {31, 7}, {-1, 5}, {9, -1}};
  for (const auto& w : windows) {
    const auto side = [](std::int64_t n) { return n < 0 ? std::string("inf") : std::to_string(n); };
    add("window_" + side(w[0]) + "_" + side(w[1]),
        [&w](Case& c) { c.Lq = 70, c.Lk = 90, c.window_left = w[0], c.window_right = w[1]; });
  }
  add("window_huge", [](Case& c) {  // wider than Lq + Lk: the same as unbounded
    c.Lq = 50, c.Lk = 70, c.window_left = c.window_right = std::numeric_limits<std::int64_t>::max();
  });
  add("causal_window_huge", [](Case& c) {
    c.Lq = 70, c.Lk = 50, c.causal = true, c.window_left = std::int64_t{1} << 62;
  });
  add("window_top_left", [](Case& c) {
    c.Lq = c.Lk = 80, c.window_left = 10, c.window_right = 3, c.alignment = Alignment::top_left;
  });
  add("causal_window", [](Case& c) { c.Lq = c.Lk = 120, c.causal = true, c.window_left = 20; });
  add("causal_window_right", [](Case& c) {  // causal clamps the right edge to 0
    c.Lq = 50, c.Lk = 80, c.causal = true, c.window_left = 8, c.window_right = 8;
  });
  add("window_lq_gt_lk",
      [](Case& c) { c.Lq = 80, c.Lk = 30, c.window_left = 5, c.window_right = 2; });

  // Masks.
  add("mask_bool_2d", [](Case& c) { c.B = 2, c.Lq = 40, c.Lk = 70, c.mask = MaskKind::bool_2d; });
  add("mask_bool_3d", [](Case& c) {
    c.B = 2, c.Lq = 40, c.Lk = 70, c.Hq = 4, c.Hkv = 2, c.mask = MaskKind::bool_3d;
  });
  add("mask_bool_batch",
      [](Case& c) { c.B = 3, c.Lq = 40, c.Lk = 70, c.mask = MaskKind::bool_batch; });
  add("mask_bool_full", [](Case& c) {
    c.B = 2, c.Lq = 40, c.Lk = 70, c.Hq = 3, c.Hkv = 1, c.mask = MaskKind::bool_full;
  });
  add("mask_bool_stride0",
      [](Case& c) { c.B = 2, c.Lq = 40, c.Lk = 70, c.mask = MaskKind::bool_stride0; });
  add("mask_key_padding",
      [](Case& c) { c.B = 2, c.Lq = 40, c.Lk = 70, c.mask = MaskKind::bool_key_padding; });
  add("mask_bool_causal",
      [](Case& c) { c.Lq = c.Lk = 65, c.causal = true, c.mask = MaskKind::bool_full; });
  add("mask_additive_2d", [](Case& c) { c.Lq = 40, c.Lk = 70, c.mask = MaskKind::additive_2d; });
  add("mask_additive_full", [](Case& c) {
    c.B = 2, c.Lq = 40, c.Lk = 70, c.Hq = 4, c.Hkv = 2, c.mask = MaskKind::additive_full;
  });
  add("mask_additive_window", [](Case& c) {
    c.Lq = c.Lk = 64, c.window_left = 6, c.window_right = 6, c.mask = MaskKind::additive_2d;
  });

  // Key lengths (0 and Lk included), with bottom-right causal.
  add("key_lengths_i32",
      [](Case& c) { c.B = 3, c.Lq = 30, c.Lk = 77, c.key_lengths = KeyLengths::i32; });
  add("key_lengths_i64",
      [](Case& c) { c.B = 4, c.Lq = 30, c.Lk = 77, c.key_lengths = KeyLengths::i64; });
  add("key_lengths_causal", [](Case& c) {
    c.B = 3, c.Lq = 45, c.Lk = 60, c.causal = true, c.key_lengths = KeyLengths::i32;
  });
  add("key_lengths_causal_i64_square",
      [](Case& c) { c.B = 3, c.Lq = c.Lk = 70, c.causal = true, c.key_lengths = KeyLengths::i64; });
  add("key_lengths_window_top_left", [](Case& c) {
    c.B = 3, c.Lq = 40, c.Lk = 50, c.window_left = 7, c.window_right = 2,
    c.alignment = Alignment::top_left, c.key_lengths = KeyLengths::i32;
  });

  // Score modifications.
  add("softcap", [](Case& c) { c.Lq = 50, c.Lk = 60, c.softcap = 5.0f, c.scale = 0.5f; });
  add("softcap_small", [](Case& c) { c.Lq = c.Lk = 40, c.softcap = 0.5f, c.causal = true; });
  add("softcap_huge", [](Case& c) { c.Lq = 23, c.Lk = 46, c.softcap = 1e5f, c.causal = true; });
  add("alibi_heads",
      [](Case& c) { c.Lq = 60, c.Lk = 90, c.Hq = 4, c.Hkv = 2, c.alibi = Alibi::heads; });
  add("alibi_batch_heads", [](Case& c) {
    c.B = 2, c.Lq = 60, c.Lk = 90, c.Hq = 4, c.Hkv = 4, c.alibi = Alibi::batch_heads;
  });
  add("alibi_causal_key_lengths", [](Case& c) {
    c.B = 3, c.Lq = c.Lk = 50, c.causal = true, c.alibi = Alibi::heads,
    c.key_lengths = KeyLengths::i32;
  });
  add("everything", [](Case& c) {
    c.B = 3, c.Lq = 47, c.Lk = 83, c.Hq = 4, c.Hkv = 2, c.D = 72, c.Dv = 40, c.causal = true,
    c.window_left = 30, c.mask = MaskKind::additive_full, c.key_lengths = KeyLengths::i64,
    c.softcap = 8.0f, c.alibi = Alibi::batch_heads, c.layout = Layout::padded;
  });
  add("dropout",
      [](Case& c) { c.B = 2, c.Lq = 70, c.Lk = 90, c.Hq = 4, c.Hkv = 2, c.dropout = 0.3f; });
  add("dropout_everything", [](Case& c) {
    c.B = 2, c.Lq = 47, c.Lk = 83, c.Hq = 2, c.Hkv = 1, c.D = 40, c.causal = true,
    c.window_left = 30, c.mask = MaskKind::bool_full, c.key_lengths = KeyLengths::i32,
    c.softcap = 8.0f, c.alibi = Alibi::heads, c.dropout = 0.6f;
  });
  add("scale_explicit", [](Case& c) { c.Lq = c.Lk = 50, c.D = 64, c.scale = 0.4f; });
  add("scale_small", [](Case& c) { c.Lq = c.Lk = 50, c.D = 64, c.scale = 0.01f; });

  // Heads: GQA ratios 1, 2, 4 and MQA.
  add("gqa_1", [](Case& c) { c.B = 2, c.Lq = c.Lk = 40, c.Hq = c.Hkv = 4; });
  add("gqa_2", [](Case& c) { c.B = 2, c.Lq = c.Lk = 40, c.Hq = 4, c.Hkv = 2; });
  add("gqa_4", [](Case& c) { c.B = 2, c.Lq = c.Lk = 40, c.Hq = 8, c.Hkv = 2; });
  add("mqa", [](Case& c) { c.B = 2, c.Lq = c.Lk = 40, c.Hq = 6, c.Hkv = 1; });

  // Layouts and output dtypes.
  add("layout_bhsd",
      [](Case& c) { c.B = 2, c.Lq = 33, c.Lk = 45, c.Hq = 4, c.Hkv = 2, c.layout = Layout::bhsd; });
  add("layout_padded", [](Case& c) {
    c.B = 2, c.Lq = 33, c.Lk = 45, c.Hq = 4, c.Hkv = 2, c.D = 40, c.layout = Layout::padded;
  });
  add("layout_padded_causal", [](Case& c) {
    c.Lq = c.Lk = 70, c.Hq = 2, c.Hkv = 1, c.D = 100, c.causal = true, c.layout = Layout::padded;
  });
  add("layout_padded_bshd", [](Case& c) {
    c.B = 2, c.Lq = 33, c.Lk = 45, c.Hq = 4, c.Hkv = 2, c.D = 24, c.layout = Layout::padded_bshd;
  });
  add("layout_padded_bshd_gqa_window", [](Case& c) {
    c.Lq = 70, c.Lk = 90, c.Hq = 6, c.Hkv = 2, c.D = 80, c.Dv = 48, c.window_left = 20,
    c.window_right = 5, c.layout = Layout::padded_bshd;
  });
  add("out_f32", [](Case& c) { c.Lq = 40, c.Lk = 60, c.out = OutDType::f32; });
  add("out_bf16", [](Case& c) { c.Lq = 40, c.Lk = 60, c.out = OutDType::bf16; });
  add("out_bf16_padded",
      [](Case& c) { c.Lq = 40, c.Lk = 60, c.out = OutDType::bf16, c.layout = Layout::padded; });

  // Threads.
  add("threads_1", [](Case& c) { c.B = 2, c.Lq = c.Lk = 100, c.threads = 1; });
  add("threads_1_causal",
      [](Case& c) { c.Lq = c.Lk = 100, c.Hq = 4, c.Hkv = 1, c.threads = 1, c.causal = true; });
  add("threads_default", [](Case& c) { c.Lq = c.Lk = 64, c.threads = 0; });

  // Long sequences: several key blocks and query tiles.
  add("long_plain", [](Case& c) { c.Lq = c.Lk = 320, c.D = 64, c.large = true; });
  add("long_causal", [](Case& c) {
    c.Lq = c.Lk = 384, c.Hq = 2, c.Hkv = 1, c.D = 128, c.causal = true, c.large = true;
  });
  add("long_cross_window", [](Case& c) {
    c.Lq = 301, c.Lk = 517, c.D = 96, c.window_left = 100, c.window_right = 40, c.large = true,
    c.layout = Layout::padded_bshd;
  });
  add("long_masked", [](Case& c) {
    c.B = 2, c.Lq = 300, c.Lk = 333, c.Hq = 2, c.Hkv = 1, c.mask = MaskKind::bool_2d,
    c.key_lengths = KeyLengths::i32, c.large = true;
  });
  add("long_lq_gt_lk_causal", [](Case& c) {
    c.Lq = 400, c.Lk = 257, c.Hq = 1, c.Hkv = 1, c.D = 64, c.causal = true, c.large = true;
  });
  return list.cases;
}

using Param = std::tuple<CpuIsa, DType, Case>;

class CpuForward : public ::testing::TestWithParam<Param> {};

TEST_P(CpuForward, MatchesReference) {
  const auto& [isa, dtype, c] = GetParam();
  if (!isa_supported(isa))
    GTEST_SKIP() << to_string(isa)
                 << " is not supported by this CPU (best: " << to_string(build_info().best_cpu_isa)
                 << ")";
  TILEATTN_TRACE_SEED();
  run_case(c, dtype, isa);
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const auto& [isa, dtype, c] = info.param;
  return std::string(to_string(isa)) + "_" + to_string(dtype) + "_" + c.name;
}

INSTANTIATE_TEST_SUITE_P(All, CpuForward,
                         ::testing::Combine(::testing::Values(CpuIsa::amx_bf16, CpuIsa::avx512_bf16,
                                                              CpuIsa::avx512, CpuIsa::avx2,
                                                              CpuIsa::portable),
                                            ::testing::Values(DType::f32, DType::f16, DType::bf16),
                                            ::testing::ValuesIn(all_cases())),
                         param_name);

}  // namespace
}  // namespace tileattn::test
