#include "nonfinite_case.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "api/validate.hpp"
#include "common/score_mods.hpp"

namespace tileattn::test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

float garbage(Rng& rng, bool finite_too) {
  switch (std::uniform_int_distribution<int>(0, finite_too ? 3 : 2)(rng)) {
    case 0: return kNaN;
    case 1: return kInf;
    case 2: return -kInf;
    default: return 3.0e38f;  // finite garbage (bf16 and f16 storage round it to Inf)
  }
}

}  // namespace

const char* to_string(Poison p) {
  return p == Poison::masked_keys ? "masked_keys" : p == Poison::anywhere ? "anywhere" : "values";
}

void poison_inputs(Problem& pb, HostTensor* dout, Poison mode, Rng& rng) {
  const Case& c = pb.c;
  HostTensor out = pb.make_out();
  const detail::AttnParams prm = detail::validate_forward(pb.args(out, nullptr));
  std::bernoulli_distribution pick(mode == Poison::masked_keys ? 0.5 : 0.06);
  std::uniform_int_distribution<std::int64_t> dim(0, c.D - 1), dim_v(0, pb.Dv - 1);
  const std::int64_t group = c.Hq / c.Hkv;
  for (std::int64_t b = 0; b < c.B; ++b)
    for (std::int64_t hk = 0; hk < c.Hkv; ++hk)
      for (std::int64_t j = 0; j < c.Lk; ++j) {
        if (mode == Poison::masked_keys) {
          bool seen = false;
          for (std::int64_t h = hk * group; h < (hk + 1) * group && !seen; ++h)
            for (std::int64_t i = 0; i < c.Lq && !seen; ++i)
              seen = detail::key_visible(prm, b, h, i, j);
          if (seen || !pick(rng)) continue;
          for (std::int64_t d = 0; d < c.D; ++d)
            pb.k.set(at(b, j, hk, d, c.Lk, c.Hkv, c.D), garbage(rng, true));
          for (std::int64_t d = 0; d < pb.Dv; ++d)
            pb.v.set(at(b, j, hk, d, c.Lk, c.Hkv, pb.Dv), garbage(rng, true));
          continue;
        }
        if (!pick(rng)) continue;
        if (mode == Poison::values) {
          pb.v.set(at(b, j, hk, dim_v(rng), c.Lk, c.Hkv, pb.Dv), garbage(rng, false));
          continue;
        }
        if (std::bernoulli_distribution(0.5)(rng))
          pb.k.set(at(b, j, hk, dim(rng), c.Lk, c.Hkv, c.D), garbage(rng, false));
        else
          pb.v.set(at(b, j, hk, dim_v(rng), c.Lk, c.Hkv, pb.Dv), garbage(rng, false));
      }
  if (mode != Poison::anywhere) return;
  std::bernoulli_distribution pick_row(0.04);
  for (std::int64_t b = 0; b < c.B; ++b)
    for (std::int64_t h = 0; h < c.Hq; ++h)
      for (std::int64_t i = 0; i < c.Lq; ++i) {
        if (pick_row(rng)) pb.q.set(at(b, i, h, dim(rng), c.Lq, c.Hq, c.D), garbage(rng, false));
        if (dout != nullptr && pick_row(rng))
          dout->set(at(b, i, h, dim_v(rng), c.Lq, c.Hq, pb.Dv), garbage(rng, false));
      }
}

void expect_matches(const std::vector<float>& got, const std::vector<float>& ref, double tol,
                    double abs_eps, const char* what) {
  ASSERT_EQ(got.size(), ref.size());
  double ref_max = 0.0;
  for (float r : ref)
    if (std::isfinite(r)) ref_max = std::max(ref_max, static_cast<double>(std::fabs(r)));
  std::int64_t nan_mismatch = 0, inf_mismatch = 0, far = 0, ref_nan = 0;
  std::string first;
  for (std::size_t n = 0; n < got.size(); ++n) {
    const float g = got[n], r = ref[n];
    ref_nan += std::isnan(r) ? 1 : 0;
    std::string problem;
    if (std::isnan(r) != std::isnan(g)) {
      ++nan_mismatch;
      problem = "NaN mismatch";
    } else if (std::isnan(r)) {
      continue;
    } else if (std::isinf(r) || std::isinf(g)) {
      if (r != g) {
        ++inf_mismatch;
        problem = "inf mismatch";
      }
    } else if (std::fabs(static_cast<double>(g) - r) > tol * ref_max + abs_eps) {
      ++far;
      problem = "far";
    }
    if (!problem.empty() && first.empty())
      first = problem + " at " + std::to_string(n) + ": got " + std::to_string(g) + ", ref " +
              std::to_string(r);
  }
  EXPECT_EQ(nan_mismatch + inf_mismatch + far, 0)
      << what << ": " << nan_mismatch << " NaN mismatches, " << inf_mismatch << " inf mismatches, "
      << far << " beyond tolerance (ref has " << ref_nan << " NaN of " << ref.size()
      << "); first: " << first;
}

CaseList poison_cases() {
  CaseList l;
  // Keys beyond key_lengths: lengths 0, 3, 299 of 300 and the full 300 (partial and whole
  // blocks behind the length).
  l.add("key_lengths",
        [](Case& c) { c.B = 4, c.Lq = 37, c.Lk = 300, c.key_lengths = KeyLengths::i32; });
  l.add("key_lengths_causal_top_left", [](Case& c) {
    c.B = 4, c.Lq = 70, c.Lk = 300, c.key_lengths = KeyLengths::i64, c.causal = true;
    c.alignment = Alignment::top_left;
  });
  l.add("bool_mask_key_padding",
        [](Case& c) { c.B = 2, c.Lq = 33, c.Lk = 150, c.mask = MaskKind::bool_key_padding; });
  l.add("bool_mask_2d", [](Case& c) { c.Lq = 45, c.Lk = 140, c.mask = MaskKind::bool_2d; });
  l.add("bool_mask_full_gqa", [](Case& c) {
    c.B = 2, c.Lq = 20, c.Lk = 90, c.Hq = 4, c.Hkv = 2, c.mask = MaskKind::bool_full;
  });
  l.add("additive_mask", [](Case& c) { c.Lq = 40, c.Lk = 130, c.mask = MaskKind::additive_full; });
  l.add("causal_bottom_right", [](Case& c) { c.Lq = c.Lk = 200, c.causal = true; });
  l.add("causal_top_left_short_q",
        [](Case& c) { c.Lq = 50, c.Lk = 260, c.causal = true, c.alignment = Alignment::top_left; });
  l.add("causal_long_q", [](Case& c) { c.Lq = 150, c.Lk = 70, c.causal = true; });
  l.add("window", [](Case& c) { c.Lq = c.Lk = 230, c.window_left = 40, c.window_right = 7; });
  l.add("mods_key_lengths", [](Case& c) {
    c.B = 3, c.Lq = 30, c.Lk = 170, c.key_lengths = KeyLengths::i32, c.softcap = 4.0f;
    c.alibi = Alibi::heads, c.causal = true;
  });
  l.add("dropout_causal", [](Case& c) { c.Lq = c.Lk = 150, c.causal = true, c.dropout = 0.2f; });
  l.add("padded_layout_dv", [](Case& c) {
    c.Lq = 40, c.Lk = 100, c.Dv = 24, c.layout = Layout::padded, c.mask = MaskKind::bool_3d;
  });
  for (Case& c : l.cases) c.out = OutDType::f32;
  return l;
}

}  // namespace tileattn::test
