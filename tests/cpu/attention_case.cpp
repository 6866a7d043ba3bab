#include "attention_case.hpp"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>

namespace tileattn::test {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// f32 storage with an f32 out: the flash result must match the reference to this rel-L2 error.
constexpr double kF32RelL2 = 1e-5;
// Otherwise (FlashAttention's rule): error <= 2 x the naive same-precision error + epsilon.
constexpr double kNaiveFactor = 2.0, kRelL2Epsilon = 1e-6, kMaxAbsEpsilon = 1e-6;
// lse: absolute error <= 2 x the naive lse error + this.
constexpr double kLseEpsilon = 1e-4;

std::vector<std::int64_t> mask_shape(const Case& c) {
  switch (c.mask) {
    case MaskKind::none: return {};
    case MaskKind::bool_2d:
    case MaskKind::additive_2d: return {c.Lq, c.Lk};
    case MaskKind::bool_3d: return {c.Hq, c.Lq, c.Lk};
    case MaskKind::bool_batch: return {c.B, 1, c.Lq, c.Lk};
    case MaskKind::bool_key_padding: return {c.B, 1, 1, c.Lk};
    case MaskKind::bool_full:
    case MaskKind::additive_full:
    case MaskKind::bool_stride0: return {c.B, c.Hq, c.Lq, c.Lk};
  }
  return {};
}

HostTensor make_mask(const Case& c, Rng& rng) {
  if (c.mask == MaskKind::none) return {};
  const bool additive = c.mask == MaskKind::additive_2d || c.mask == MaskKind::additive_full;
  const std::vector<std::int64_t> shape = mask_shape(c);
  HostTensor m = c.mask == MaskKind::bool_stride0
                     ? HostTensor(DType::boolean, shape, {0, 0, c.Lk, 1})
                     : HostTensor::contiguous(additive ? DType::f32 : DType::boolean, shape);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // Every mask also hides one whole query row (for the key-padding mask: every key of the last
  // batch entry), so fully masked rows are always exercised.
  const std::int64_t masked_row = std::min<std::int64_t>(additive ? 2 : 1, c.Lq - 1);
  const auto rank = static_cast<std::int64_t>(shape.size());
  std::int64_t row_size = shape[static_cast<std::size_t>(rank - 1)];
  std::int64_t rows = m.numel() / std::max<std::int64_t>(row_size, 1);
  for (std::int64_t n = 0; n < m.numel(); ++n) {
    const std::int64_t row = n / row_size;
    const std::int64_t i = row % shape[static_cast<std::size_t>(rank - 2)];
    bool hidden = i == masked_row;
    if (c.mask == MaskKind::bool_key_padding) hidden = c.B > 1 && row == rows - 1;
    if (additive)
      m.set(n, hidden || uniform(rng) < 0.15f ? kNegInf : normal(rng));
    else
      m.set(n, hidden || uniform(rng) < 0.2f ? 0.0f : 1.0f);
  }
  return m;
}

}  // namespace

void CaseList::add(const std::string& name, const std::function<void(Case&)>& tweak) {
  Case c;
  c.name = name;
  tweak(c);
  if (c.large) {
    c.Lq = scaled(c.Lq, 17);
    c.Lk = scaled(c.Lk, 17);
  }
  cases.push_back(c);
}

// Enumerators are ordered best first: a larger value is a lower level.
bool isa_supported(CpuIsa isa) {
  return static_cast<std::uint8_t>(isa) >= static_cast<std::uint8_t>(build_info().best_cpu_isa);
}

Problem::Problem(const Case& cs, DType dt, Rng& rng)
    : c(cs),
      dtype(dt),
      out_dtype(cs.out == OutDType::same  ? dt
                : cs.out == OutDType::f32 ? DType::f32
                                          : DType::bf16),
      Dv(cs.Dv > 0 ? cs.Dv : cs.D),
      q(HostTensor::operand(dt, cs.B, cs.Lq, cs.Hq, cs.D, cs.layout)),
      k(HostTensor::operand(dt, cs.B, cs.Lk, cs.Hkv, cs.D, cs.layout)),
      v(HostTensor::operand(dt, cs.B, cs.Lk, cs.Hkv, Dv, cs.layout)) {
  q.fill_normal(rng);
  k.fill_normal(rng);
  if (c.key_ramp != 0.0f) {
    for (std::int64_t n = 0; n < k.numel(); ++n) {
      const std::int64_t j = n / (c.Hkv * c.D) % c.Lk;  // logical [B, Lk, Hkv, D]
      k.set(n, k.get(n) * (1.0f + c.key_ramp * static_cast<float>(j) / static_cast<float>(c.Lk)));
    }
  }
  if (c.query_ramp != 0.0f) {
    for (std::int64_t n = 0; n < q.numel(); ++n) {
      const std::int64_t i = n / (c.Hq * c.D) % c.Lq;  // logical [B, Lq, Hq, D]
      q.set(n, q.get(n) * (1.0f + c.query_ramp * static_cast<float>(i) / static_cast<float>(c.Lq)));
    }
  }
  v.fill_normal(rng);
  mask = make_mask(c, rng);
  if (c.key_lengths != KeyLengths::none) {
    key_lengths =
        HostTensor::contiguous(c.key_lengths == KeyLengths::i32 ? DType::i32 : DType::i64, {c.B});
    std::uniform_int_distribution<std::int64_t> length(std::min<std::int64_t>(1, c.Lk), c.Lk);
    for (std::int64_t b = 0; b < c.B; ++b) {
      const std::int64_t value = b % 3 == 0 ? c.Lk : b % 3 == 1 ? 0 : length(rng);
      key_lengths.set(b, static_cast<float>(value));
    }
  }
  dropout_seed = rng();
  dropout_offset = rng() >> 1;
  if (c.alibi == Alibi::heads) {
    alibi = HostTensor::contiguous(DType::f32, {c.Hq});
    for (std::int64_t h = 0; h < c.Hq; ++h)
      alibi.set(h, std::exp2(-8.0f * static_cast<float>(h + 1) / static_cast<float>(c.Hq)));
  } else if (c.alibi == Alibi::batch_heads) {
    alibi = HostTensor::contiguous(DType::f32, {c.B, c.Hq});
    std::uniform_real_distribution<float> slope(0.01f, 0.5f);
    for (std::int64_t n = 0; n < alibi.numel(); ++n) alibi.set(n, slope(rng));
  }
}

HostTensor Problem::make_out() const {
  HostTensor out = HostTensor::operand(out_dtype, c.B, c.Lq, c.Hq, Dv, c.layout);
  out.poison();
  return out;
}

HostTensor Problem::make_lse() const {
  HostTensor lse = HostTensor::lse(c.B, c.Hq, c.Lq, c.layout);
  lse.poison();
  return lse;
}

AttentionArgs Problem::args(const HostTensor& out, const HostTensor* lse) const {
  AttentionArgs a;
  a.q = q.view();
  a.k = k.view();
  a.v = v.view();
  a.out = out.view();
  if (lse != nullptr) a.lse = lse->view();
  if (c.scale != 0.0f) a.scale = c.scale;  // 0: the default 1/sqrt(D)
  a.causal = c.causal;
  a.alignment = c.alignment;
  a.window_left = c.window_left;
  a.window_right = c.window_right;
  if (c.mask != MaskKind::none) a.mask = mask.view();
  if (c.key_lengths != KeyLengths::none) a.key_lengths = key_lengths.view();
  a.softcap = c.softcap;
  if (c.alibi != Alibi::none) a.alibi_slopes = alibi.view();
  a.dropout_p = c.dropout;
  a.dropout_seed = dropout_seed;
  a.dropout_offset = dropout_offset;
  return a;
}

CaseResult run_case(const Case& c, DType dtype, CpuIsa isa) {
  Rng rng = make_rng();
  const Problem problem(c, dtype, rng);
  const std::int64_t Dv = problem.Dv;
  CaseResult result;

  // The oracle: double precision, f32 out, always with lse (it marks the fully masked rows).
  const HostTensor ref_out = HostTensor::contiguous(DType::f32, {c.B, c.Lq, c.Hq, Dv});
  const HostTensor ref_lse = HostTensor::contiguous(DType::f32, {c.B, c.Hq, c.Lq});
  {
    AttentionArgs a = problem.args(ref_out, &ref_lse);
    a.out = ref_out.view();
    a.lse = ref_lse.view();
    attention_forward(a, {Backend::reference, 2});
  }
  const std::vector<float> ref = ref_out.to_f32(), ref_lse_values = ref_lse.to_f32();

  HostTensor out = problem.make_out();
  HostTensor lse = problem.make_lse();
  const AttentionArgs args = problem.args(out, c.lse ? &lse : nullptr);
  SCOPED_TRACE(describe(args));
  const NaiveResult naive = naive_attention(args);

  const std::vector<std::uint8_t> q_bytes = problem.q.bytes(), k_bytes = problem.k.bytes(),
                                  v_bytes = problem.v.bytes(), mask_bytes = problem.mask.bytes();
  Context ctx;
  ctx.backend = Backend::cpu;
  ctx.threads = c.threads;
  ctx.cpu_isa = isa;
  attention_forward(args, ctx);

  EXPECT_EQ(problem.q.bytes(), q_bytes) << "q was modified";
  EXPECT_EQ(problem.k.bytes(), k_bytes) << "k was modified";
  EXPECT_EQ(problem.v.bytes(), v_bytes) << "v was modified";
  EXPECT_EQ(problem.mask.bytes(), mask_bytes) << "mask was modified";
  EXPECT_TRUE(out.padding_intact()) << "out was written outside its logical elements";
  EXPECT_TRUE(lse.padding_intact()) << "lse was written outside its logical elements";

  const std::vector<float> got = out.to_f32();
  result.kernel = compare(got, ref);
  result.naive = compare(naive.out, ref);
  result.naive_lse = compare_lse(naive.lse, ref_lse_values);
  EXPECT_EQ(result.kernel.nonfinite, 0)
      << "out has NaN/inf (poison left unwritten?) where the reference is finite; "
      << result.kernel.str();

  // Fully masked rows: out exactly 0.
  std::int64_t masked_rows = 0, bad_masked = 0;
  for (std::int64_t b = 0; b < c.B; ++b)
    for (std::int64_t h = 0; h < c.Hq; ++h)
      for (std::int64_t i = 0; i < c.Lq; ++i) {
        if (ref_lse_values[static_cast<std::size_t>((b * c.Hq + h) * c.Lq + i)] != kNegInf)
          continue;
        ++masked_rows;
        for (std::int64_t d = 0; d < Dv; ++d)
          if (got[static_cast<std::size_t>(((b * c.Lq + i) * c.Hq + h) * Dv + d)] != 0.0f) {
            if (bad_masked++ == 0)
              ADD_FAILURE() << "fully masked row (b " << b << ", h " << h << ", i " << i
                            << ") has out[" << d << "] = "
                            << got[static_cast<std::size_t>(((b * c.Lq + i) * c.Hq + h) * Dv + d)]
                            << ", expected 0";
          }
      }
  EXPECT_EQ(bad_masked, 0) << "non-zero outputs in " << masked_rows << " fully masked rows";

  if (dtype == DType::f32 && problem.out_dtype == DType::f32) {
    EXPECT_LE(result.kernel.rel_l2, kF32RelL2) << result.kernel.str();
    EXPECT_LE(result.kernel.max_abs, 10.0 * kF32RelL2 * result.kernel.ref_max + kMaxAbsEpsilon)
        << result.kernel.str();
  } else {
    EXPECT_LE(result.kernel.rel_l2, kNaiveFactor * result.naive.rel_l2 + kRelL2Epsilon)
        << "kernel: " << result.kernel.str() << "\nnaive same-precision: " << result.naive.str();
    EXPECT_LE(result.kernel.max_abs, kNaiveFactor * result.naive.max_abs + kMaxAbsEpsilon)
        << "kernel: " << result.kernel.str() << "\nnaive same-precision: " << result.naive.str();
  }

  if (c.lse) {
    result.kernel_lse = compare_lse(lse.to_f32(), ref_lse_values);
    EXPECT_EQ(result.kernel_lse.mismatched_inf, 0) << result.kernel_lse.str();
    EXPECT_LE(result.kernel_lse.max_abs, kNaiveFactor * result.naive_lse.max_abs + kLseEpsilon)
        << "kernel: " << result.kernel_lse.str() << "\nnaive: " << result.naive_lse.str();
  }

  std::cout << "[ stats ] " << to_string(isa) << " " << to_string(dtype) << " out "
            << to_string(problem.out_dtype) << " " << c.name << " rel_l2 " << result.kernel.rel_l2
            << " max_abs " << result.kernel.max_abs << " naive_rel_l2 " << result.naive.rel_l2
            << " naive_max_abs " << result.naive.max_abs << " lse_max_abs "
            << result.kernel_lse.max_abs << " naive_lse_max_abs " << result.naive_lse.max_abs
            << " masked_rows " << masked_rows << "\n";
  return result;
}

}  // namespace tileattn::test
