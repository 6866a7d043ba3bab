// merge_attention_states on the host: attention over keys split into parts and merged equals one
// call over all keys (two- and n-way, padded and varlen results, 16-bit parts); the special
// rows (a part that saw no key is never read, every part empty, a poisoned part); merging in
// place; argument errors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "attention_case.hpp"

namespace tileattn::test {
namespace {

struct Attended {
  HostTensor out, lse;
};

// Attention of q over keys [k0, k1) of k / v (BSHD), f32 reference backend.
Attended attend(const HostTensor& q, const HostTensor& k, const HostTensor& v, std::int64_t k0,
                std::int64_t k1, DType out_dtype) {
  const std::int64_t B = q.shape()[0], Lq = q.shape()[1], Hq = q.shape()[2], D = q.shape()[3];
  const std::int64_t Hkv = k.shape()[2], n = k1 - k0;
  HostTensor ks = HostTensor::contiguous(k.dtype(), {B, n, Hkv, D});
  HostTensor vs = HostTensor::contiguous(v.dtype(), {B, n, Hkv, D});
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t e = 0; e < Hkv * D; ++e) {
        const std::int64_t from = ((b * k.shape()[1] + k0 + j) * Hkv) * D + e;
        const std::int64_t to = ((b * n + j) * Hkv) * D + e;
        ks.set(to, k.get(from));
        vs.set(to, v.get(from));
      }
  Attended r{HostTensor::contiguous(out_dtype, {B, Lq, Hq, D}),
             HostTensor::contiguous(DType::f32, {B, Hq, Lq})};
  AttentionArgs a;
  a.q = q.view(), a.k = ks.view(), a.v = vs.view(), a.out = r.out.view(), a.lse = r.lse.view();
  a.scale = 0.3f;
  Context ctx;
  ctx.backend = Backend::reference;
  attention_forward(a, ctx);
  return r;
}

void expect_close(const HostTensor& got, const HostTensor& want, double tol, const char* what) {
  const ErrorStats e = compare(got.to_f32(), want.to_f32());
  EXPECT_EQ(e.nonfinite, 0) << what;
  EXPECT_LE(e.rel_l2, tol) << what << ": " << e.str();
}

TEST(Merge, SplitKeysEqualOneCall) {
  TILEATTN_TRACE_SEED();
  Rng rng = make_rng();
  const std::int64_t B = 2, Lq = 19, Lk = 77, Hq = 4, Hkv = 2, D = 24;
  for (const DType part_dtype : {DType::f32, DType::bf16}) {
    HostTensor q = HostTensor::contiguous(DType::f32, {B, Lq, Hq, D});
    HostTensor k = HostTensor::contiguous(DType::f32, {B, Lk, Hkv, D});
    HostTensor v = HostTensor::contiguous(DType::f32, {B, Lk, Hkv, D});
    q.fill_normal(rng, 2.0f);
    k.fill_normal(rng);
    v.fill_normal(rng);
    const Attended whole = attend(q, k, v, 0, Lk, DType::f32);
    for (const int parts : {1, 2, 3, 7}) {
      SCOPED_TRACE(std::to_string(parts) + " parts of " + to_string(part_dtype));
      std::vector<std::int64_t> cuts{0, Lk};
      while (static_cast<int>(cuts.size()) < parts + 1)
        cuts.push_back(1 + static_cast<std::int64_t>(rng() % (Lk - 1)));
      std::sort(cuts.begin(), cuts.end());
      cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
      std::vector<Attended> split;
      for (std::size_t i = 0; i + 1 < cuts.size(); ++i)
        split.push_back(attend(q, k, v, cuts[i], cuts[i + 1], part_dtype));
      std::vector<Tensor> outs, lses;
      for (const Attended& s : split) outs.push_back(s.out.view()), lses.push_back(s.lse.view());
      HostTensor out = HostTensor::contiguous(DType::f32, {B, Lq, Hq, D});
      HostTensor lse = HostTensor::contiguous(DType::f32, {B, Hq, Lq});
      out.poison();
      lse.poison();
      merge_attention_states(outs, lses, out.view(), lse.view());
      // The merge sums in f32; 16-bit parts carry their own rounding (2^-8 relative).
      expect_close(out, whole.out, part_dtype == DType::f32 ? 2e-6 : 4e-3, "out");
      expect_close(lse, whole.lse, 1e-6, "lse");
    }
  }
}

TEST(Merge, SpecialRows) {
  const std::int64_t L = 3, H = 1, D = 4;
  HostTensor a = HostTensor::contiguous(DType::f32, {1, L, H, D});
  HostTensor b = HostTensor::contiguous(DType::f32, {1, L, H, D});
  HostTensor la = HostTensor::contiguous(DType::f32, {1, H, L});
  HostTensor lb = HostTensor::contiguous(DType::f32, {1, H, L});
  a.fill(1.0f);
  b.fill(NAN);  // b saw no key in rows 0 and 1: its out there must never be read
  for (std::int64_t d = 0; d < D; ++d) b.set(2 * D + d, 3.0f);
  const float lse_a[] = {0.5f, -INFINITY, 0.0f}, lse_b[] = {-INFINITY, -INFINITY, NAN};
  for (std::int64_t l = 0; l < L; ++l) la.set(l, lse_a[l]), lb.set(l, lse_b[l]);
  HostTensor out = HostTensor::contiguous(DType::bf16, {1, L, H, D});
  HostTensor lse = HostTensor::contiguous(DType::f32, {1, H, L});
  out.poison();
  merge_attention_states(a.view(), la.view(), b.view(), lb.view(), out.view(), lse.view());
  for (std::int64_t d = 0; d < D; ++d) {
    EXPECT_EQ(out.get(d), 1.0f) << "row 0: only a counts";
    EXPECT_EQ(out.get(D + d), 0.0f) << "row 1: no part saw a key";
    EXPECT_TRUE(std::isnan(out.get(2 * D + d))) << "row 2: b is poisoned";
  }
  EXPECT_EQ(lse.get(0), 0.5f);
  EXPECT_EQ(lse.get(1), -INFINITY);
  EXPECT_TRUE(std::isnan(lse.get(2)));
}

TEST(Merge, InPlaceAndVarlenResults) {
  TILEATTN_TRACE_SEED();
  Rng rng = make_rng();
  const std::int64_t T = 11, H = 3, D = 8;  // varlen results: out [T, H, D], lse [H, T]
  HostTensor a = HostTensor::contiguous(DType::f16, {T, H, D});
  HostTensor b = HostTensor::contiguous(DType::f16, {T, H, D});
  HostTensor la = HostTensor::contiguous(DType::f32, {H, T});
  HostTensor lb = HostTensor::contiguous(DType::f32, {H, T});
  a.fill_normal(rng);
  b.fill_normal(rng);
  la.fill_normal(rng, 3.0f);
  lb.fill_normal(rng, 3.0f);
  // Expected, from the definition in double precision.
  std::vector<double> want(static_cast<std::size_t>(T * H * D)), want_lse(T * H);
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t h = 0; h < H; ++h) {
      const double x = la.get(h * T + t), y = lb.get(h * T + t), m = std::max(x, y);
      const double s = std::exp(x - m) + std::exp(y - m);
      want_lse[static_cast<std::size_t>(h * T + t)] = m + std::log(s);
      for (std::int64_t d = 0; d < D; ++d) {
        const std::int64_t e = (t * H + h) * D + d;
        want[static_cast<std::size_t>(e)] =
            (std::exp(x - m) * a.get(e) + std::exp(y - m) * b.get(e)) / s;
      }
    }
  merge_attention_states(a.view(), la.view(), b.view(), lb.view(), a.view(), la.view());
  for (std::int64_t e = 0; e < T * H * D; ++e)
    EXPECT_NEAR(a.get(e), want[static_cast<std::size_t>(e)],
                2e-3 * std::abs(want[static_cast<std::size_t>(e)]) + 1e-3)
        << "element " << e;
  for (std::int64_t e = 0; e < T * H; ++e)
    EXPECT_NEAR(la.get(e), want_lse[static_cast<std::size_t>(e)], 1e-5) << "lse " << e;
}

TEST(Merge, Errors) {
  HostTensor a = HostTensor::contiguous(DType::f32, {1, 4, 2, 8});
  HostTensor b = HostTensor::contiguous(DType::f32, {1, 4, 2, 8});
  HostTensor la = HostTensor::contiguous(DType::f32, {1, 2, 4});
  HostTensor lb = HostTensor::contiguous(DType::f32, {1, 2, 4});
  HostTensor out = HostTensor::contiguous(DType::f32, {1, 4, 2, 8});
  HostTensor wrong = HostTensor::contiguous(DType::f32, {1, 4, 3, 8});
  HostTensor lse_wrong = HostTensor::contiguous(DType::f32, {1, 4, 2});
  const auto merge = [&](const Tensor& oa, const Tensor& lsa, const Tensor& o, const Tensor& l) {
    return [=] { merge_attention_states(oa, lsa, b.view(), lb.view(), o, l); };
  };
  expect_argument_error(merge(wrong.view(), la.view(), out.view(), Tensor{}), "outs[0]",
                        "must equal out's");
  expect_argument_error(merge(a.view(), lse_wrong.view(), out.view(), Tensor{}), "lses[0]",
                        "dimension 1");
  Tensor lse_in_out = la.view();  // the merged lse written over the merged out
  lse_in_out.data = out.view().data;
  expect_argument_error(merge(a.view(), la.view(), out.view(), lse_in_out), "lse", "overlaps out");
  Tensor a_half = a.view();
  a_half.shape[1] = 2;
  Tensor b_half = b.view();
  b_half.shape[1] = 2;
  Tensor la_half = la.view();
  la_half.shape[2] = 2;
  Tensor lb_half = lb.view();
  lb_half.shape[2] = 2;
  // Rows 1..2 of a as the result of merging rows 0..1 of a: overlaps without being the view.
  Tensor shifted = a.view();
  shifted.data = static_cast<float*>(shifted.data) + 16;
  shifted.shape[1] = 2;
  expect_argument_error(
      [&] { merge_attention_states(a_half, la_half, b_half, lb_half, shifted, Tensor{}); }, "out",
      "overlaps outs[0]");
  std::vector<Tensor> none;
  expect_argument_error([&] { merge_attention_states(none, none, out.view(), Tensor{}); }, "outs",
                        "1..32");
  std::vector<Tensor> many(33, a.view()), many_lse(33, la.view());
  expect_argument_error([&] { merge_attention_states(many, many_lse, out.view(), Tensor{}); },
                        "outs", "got 33");
}

}  // namespace
}  // namespace tileattn::test
