// `tileattn run` on .npy files against the reference backend called directly on the same data.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "cli_test_support.hpp"
#include "common/float_convert.hpp"

namespace tileattn::cli_test {
namespace {

enum class MaskKind { none, boolean, additive };
enum class KeyLengths { none, i32, i64 };

struct Case {
  std::int64_t batch = 2, len_q = 37, len_k = 53, heads = 4, kv_heads = 2, dim = 32, dim_v = 24;
  bool bhsd = false;
  std::string causal;  // "", "top-left", "bottom-right"
  std::string window;  // "", "LEFT,RIGHT"
  MaskKind mask = MaskKind::none;
  KeyLengths key_lengths = KeyLengths::none;
  float softcap = 0.0f;
  float scale = 0.0f;
  bool alibi = false;
  bool lse = false;
  bool f16_inputs = false;
  std::string dtype;  // --dtype, "" = default
};

// Operand [B, L, H, D] in the case's file order.
std::vector<std::int64_t> file_shape(const Case& c, std::int64_t len, std::int64_t heads,
                                     std::int64_t dim) {
  return c.bhsd ? std::vector<std::int64_t>{c.batch, heads, len, dim}
                : std::vector<std::int64_t>{c.batch, len, heads, dim};
}

Tensor operand(const Case& c, void* data, DType dtype, std::int64_t len, std::int64_t heads,
               std::int64_t dim) {
  const Tensor t = contiguous(data, dtype, file_shape(c, len, heads, dim));
  return c.bhsd ? bhsd_as_bshd(t) : t;
}

// Values as the kernel sees them: rounded to the storage precision it computes in.
std::vector<std::uint16_t> to_bits(const std::vector<float>& x, DType dtype) {
  std::vector<std::uint16_t> bits(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    bits[i] = dtype == DType::f16 ? detail::f32_to_f16(x[i]) : detail::f32_to_bf16(x[i]);
  return bits;
}

void run_case(const Case& c) {
  SCOPED_TRACE(seed_note());
  std::mt19937_64 rng(test_seed());
  TempDir dir;
  std::vector<std::string> args = {"run"};
  const auto add_file = [&](const char* flag, const std::string& name) {
    args.push_back(flag);
    args.push_back(dir.file(name));
  };

  const auto q_shape = file_shape(c, c.len_q, c.heads, c.dim);
  const auto k_shape = file_shape(c, c.len_k, c.kv_heads, c.dim);
  const auto v_shape = file_shape(c, c.len_k, c.kv_heads, c.dim_v);
  const auto out_shape = file_shape(c, c.len_q, c.heads, c.dim_v);
  std::vector<float> q = random_normal(rng, product(q_shape));
  std::vector<float> k = random_normal(rng, product(k_shape));
  std::vector<float> v = random_normal(rng, product(v_shape));

  // Reference inputs: the f32 values, or the 16-bit values the kernel computes on.
  const DType compute = c.dtype == "bf16"                 ? DType::bf16
                        : c.dtype == "f16"                ? DType::f16
                        : c.dtype.empty() && c.f16_inputs ? DType::f16
                                                          : DType::f32;
  std::vector<std::uint16_t> q16, k16, v16;
  if (c.f16_inputs) {
    q16 = write_f16(dir.file("q.npy"), q_shape, q);
    k16 = write_f16(dir.file("k.npy"), k_shape, k);
    v16 = write_f16(dir.file("v.npy"), v_shape, v);
    if (compute != DType::f16) {  // f16 -> f32 (exact) -> compute
      for (const auto& [bits, values] :
           {std::pair{&q16, &q}, std::pair{&k16, &k}, std::pair{&v16, &v}})
        std::transform(bits->begin(), bits->end(), values->begin(), detail::f16_to_f32);
    }
  } else {
    write_f32(dir.file("q.npy"), q_shape, q);
    write_f32(dir.file("k.npy"), k_shape, k);
    write_f32(dir.file("v.npy"), v_shape, v);
  }
  if (compute != DType::f32 && !(c.f16_inputs && compute == DType::f16)) {
    q16 = to_bits(q, compute);
    k16 = to_bits(k, compute);
    v16 = to_bits(v, compute);
  }
  add_file("--q", "q.npy");
  add_file("--k", "k.npy");
  add_file("--v", "v.npy");
  add_file("--out", "out.npy");

  AttentionArgs ref;
  void* qd = compute == DType::f32 ? static_cast<void*>(q.data()) : q16.data();
  void* kd = compute == DType::f32 ? static_cast<void*>(k.data()) : k16.data();
  void* vd = compute == DType::f32 ? static_cast<void*>(v.data()) : v16.data();
  ref.q = operand(c, qd, compute, c.len_q, c.heads, c.dim);
  ref.k = operand(c, kd, compute, c.len_k, c.kv_heads, c.dim);
  ref.v = operand(c, vd, compute, c.len_k, c.kv_heads, c.dim_v);
  std::vector<float> ref_out(static_cast<std::size_t>(product(out_shape)));
  ref.out = operand(c, ref_out.data(), DType::f32, c.len_q, c.heads, c.dim_v);
  if (c.bhsd) args.insert(args.end(), {"--layout", "bhsd"});
  if (!c.dtype.empty()) args.insert(args.end(), {"--dtype", c.dtype});

  if (!c.causal.empty()) {
    args.insert(args.end(), {"--causal", c.causal});
    ref.causal = true;
    ref.alignment = c.causal == "top-left" ? Alignment::top_left : Alignment::bottom_right;
  }
  if (!c.window.empty()) {
    args.insert(args.end(), {"--window", c.window});
    const auto comma = c.window.find(',');
    ref.window_left = std::stoll(c.window.substr(0, comma));
    ref.window_right = std::stoll(c.window.substr(comma + 1));
  }
  if (c.softcap > 0.0f) {
    args.insert(args.end(), {"--softcap", std::to_string(c.softcap)});
    ref.softcap = std::stof(std::to_string(c.softcap));
  }
  if (c.scale != 0.0f) {
    args.insert(args.end(), {"--scale", std::to_string(c.scale)});
    ref.scale = std::stof(std::to_string(c.scale));
  }

  std::vector<std::uint8_t> bool_mask;
  std::vector<float> float_mask;
  if (c.mask == MaskKind::boolean) {  // [B, 1, Lq, Lk]: broadcast over heads
    const std::vector<std::int64_t> shape = {c.batch, 1, c.len_q, c.len_k};
    std::bernoulli_distribution attend(0.7);
    bool_mask.resize(static_cast<std::size_t>(product(shape)));
    for (auto& m : bool_mask) m = attend(rng) ? 1 : 0;
    std::fill_n(bool_mask.begin(), c.len_k, 0);  // batch 0, row 0: fully masked
    npy::write(dir.file("mask.npy"), npy::ElementType::boolean, shape, bool_mask.data());
    ref.mask = contiguous(bool_mask.data(), DType::boolean, shape);
    add_file("--mask", "mask.npy");
  } else if (c.mask == MaskKind::additive) {  // [Lq, Lk] with some -inf
    const std::vector<std::int64_t> shape = {c.len_q, c.len_k};
    float_mask = random_normal(rng, product(shape));
    for (std::size_t i = 0; i < float_mask.size(); i += 7)
      float_mask[i] = -std::numeric_limits<float>::infinity();
    write_f32(dir.file("mask.npy"), shape, float_mask);
    ref.mask = contiguous(float_mask.data(), DType::f32, shape);
    add_file("--mask", "mask.npy");
  }

  std::vector<std::int32_t> lens32;
  std::vector<std::int64_t> lens64;
  if (c.key_lengths != KeyLengths::none) {
    std::uniform_int_distribution<std::int64_t> len(1, c.len_k);
    for (std::int64_t b = 0; b < c.batch; ++b) lens64.push_back(b == 0 ? 0 : len(rng));
    if (c.key_lengths == KeyLengths::i32) {
      lens32.assign(lens64.begin(), lens64.end());
      npy::write(dir.file("lens.npy"), npy::ElementType::i32, {c.batch}, lens32.data());
      ref.key_lengths = contiguous(lens32.data(), DType::i32, {c.batch});
    } else {
      npy::write(dir.file("lens.npy"), npy::ElementType::i64, {c.batch}, lens64.data());
      ref.key_lengths = contiguous(lens64.data(), DType::i64, {c.batch});
    }
    add_file("--key-lengths", "lens.npy");
  }

  std::vector<float> slopes;
  if (c.alibi) {
    for (std::int64_t h = 0; h < c.heads; ++h)
      slopes.push_back(std::exp2(-8.0f * static_cast<float>(h + 1) / static_cast<float>(c.heads)));
    write_f32(dir.file("alibi.npy"), {c.heads}, slopes);
    ref.alibi_slopes = contiguous(slopes.data(), DType::f32, {c.heads});
    add_file("--alibi", "alibi.npy");
  }

  std::vector<float> ref_lse;
  if (c.lse) {
    ref_lse.resize(static_cast<std::size_t>(c.batch * c.heads * c.len_q));
    ref.lse = contiguous(ref_lse.data(), DType::f32, {c.batch, c.heads, c.len_q});
    add_file("--lse", "lse.npy");
  }

  Context ref_ctx;
  ref_ctx.backend = Backend::reference;
  attention_forward(ref, ref_ctx);

  const CliResult r = run_cli(args, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  std::vector<std::int64_t> shape;
  const std::vector<float> out = read_f32(dir.file("out.npy"), &shape);
  EXPECT_EQ(shape, out_shape);
  const double tolerance = compute == DType::f32 ? 1e-5 : 1e-2;
  EXPECT_LE(rel_l2(out, ref_out), tolerance);
  if (c.lse) {
    const std::vector<float> lse = read_f32(dir.file("lse.npy"), &shape);
    EXPECT_EQ(shape, (std::vector<std::int64_t>{c.batch, c.heads, c.len_q}));
    EXPECT_LE(rel_l2(lse, ref_lse), tolerance);
  }
}

TEST(CliRun, Plain) {
  run_case({});
}

TEST(CliRun, PlainWithLse) {
  Case c;
  c.lse = true;
  run_case(c);
}

TEST(CliRun, BhsdLayout) {
  Case c;
  c.bhsd = true;
  c.lse = true;
  run_case(c);
}

TEST(CliRun, CausalTopLeft) {
  Case c;
  c.causal = "top-left";
  c.lse = true;
  run_case(c);
}

TEST(CliRun, CausalBottomRight) {
  Case c;
  c.causal = "bottom-right";
  c.lse = true;
  run_case(c);
}

TEST(CliRun, CausalBottomRightMoreQueriesThanKeys) {
  Case c;
  c.len_q = 61;  // the first rows see no key: out = 0, lse = -inf
  c.causal = "bottom-right";
  c.lse = true;
  run_case(c);
}

TEST(CliRun, Window) {
  Case c;
  c.window = "5,3";
  c.lse = true;
  run_case(c);
}

TEST(CliRun, WindowUnboundedLeftWithCausal) {
  Case c;
  c.window = "-1,7";
  c.causal = "top-left";
  run_case(c);
}

TEST(CliRun, BoolMask) {
  Case c;
  c.mask = MaskKind::boolean;
  c.lse = true;
  run_case(c);
}

TEST(CliRun, AdditiveF32Mask) {
  Case c;
  c.mask = MaskKind::additive;
  c.lse = true;
  run_case(c);
}

TEST(CliRun, KeyLengthsInt32) {
  Case c;
  c.key_lengths = KeyLengths::i32;
  c.lse = true;
  run_case(c);
}

TEST(CliRun, KeyLengthsInt64) {
  Case c;
  c.key_lengths = KeyLengths::i64;
  c.causal = "bottom-right";
  c.lse = true;
  run_case(c);
}

TEST(CliRun, Softcap) {
  Case c;
  c.softcap = 2.5f;
  c.scale = 0.5f;
  run_case(c);
}

TEST(CliRun, Alibi) {
  Case c;
  c.alibi = true;
  c.lse = true;
  run_case(c);
}

TEST(CliRun, F16Inputs) {
  Case c;
  c.f16_inputs = true;
  c.lse = true;
  run_case(c);
}

TEST(CliRun, F16InputsComputedInF32) {
  Case c;
  c.f16_inputs = true;
  c.dtype = "f32";
  run_case(c);
}

TEST(CliRun, DtypeBf16) {
  Case c;
  c.dtype = "bf16";
  c.lse = true;
  run_case(c);
}

TEST(CliRun, EverythingAtOnceBhsd) {
  Case c;
  c.bhsd = true;
  c.causal = "bottom-right";
  c.window = "9,-1";
  c.mask = MaskKind::boolean;
  c.key_lengths = KeyLengths::i32;
  c.softcap = 4.0f;
  c.alibi = true;
  c.lse = true;
  run_case(c);
}

// A varlen batch through --cu-seqlens-q/-k (causal, key lengths behind which the keys are NaN)
// against the reference run on each sequence alone.
TEST(CliRun, VarlenCausalWithKeyLengths) {
  SCOPED_TRACE(seed_note());
  std::mt19937_64 rng(test_seed());
  TempDir dir;
  const std::vector<std::int32_t> cu_q{0, 5, 5, 38}, cu_k{0, 9, 12, 52};
  const std::vector<std::int32_t> used{7, 0, 33};
  const std::int64_t Hq = 4, Hkv = 2, D = 16, Tq = cu_q.back(), Tk = cu_k.back();
  std::vector<float> q = random_normal(rng, Tq * Hq * D), k = random_normal(rng, Tk * Hkv * D),
                     v = random_normal(rng, Tk * Hkv * D);
  for (std::size_t b = 0; b < used.size(); ++b)
    for (std::int64_t j = cu_k[b] + used[b]; j < cu_k[b + 1]; ++j)
      for (std::int64_t e = 0; e < Hkv * D; ++e) k[static_cast<std::size_t>(j * Hkv * D + e)] = NAN;
  write_f32(dir.file("q.npy"), {Tq, Hq, D}, q);
  write_f32(dir.file("k.npy"), {Tk, Hkv, D}, k);
  write_f32(dir.file("v.npy"), {Tk, Hkv, D}, v);
  npy::write(dir.file("cq.npy"), npy::ElementType::i32, {4}, cu_q.data());
  npy::write(dir.file("ck.npy"), npy::ElementType::i32, {4}, cu_k.data());
  npy::write(dir.file("used.npy"), npy::ElementType::i32, {3}, used.data());
  const CliResult r =
      run_cli({"run", "--q", dir.file("q.npy"), "--k", dir.file("k.npy"), "--v", dir.file("v.npy"),
               "--out", dir.file("out.npy"), "--lse", dir.file("lse.npy"), "--cu-seqlens-q",
               dir.file("cq.npy"), "--cu-seqlens-k", dir.file("ck.npy"), "--key-lengths",
               dir.file("used.npy"), "--causal", "bottom-right"},
              dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::int64_t> shape;
  const std::vector<float> out = read_f32(dir.file("out.npy"), &shape);
  EXPECT_EQ(shape, (std::vector<std::int64_t>{Tq, Hq, D}));
  const std::vector<float> lse = read_f32(dir.file("lse.npy"), &shape);
  EXPECT_EQ(shape, (std::vector<std::int64_t>{Hq, Tq}));
  for (std::size_t b = 0; b < used.size(); ++b) {
    const std::int64_t nq = cu_q[b + 1] - cu_q[b], nk = cu_k[b + 1] - cu_k[b];
    if (nq == 0) continue;  // no rows to compare
    std::vector<float> ref_out(static_cast<std::size_t>(nq * Hq * D)),
        ref_lse(static_cast<std::size_t>(Hq * nq));
    std::int32_t kl = used[b];
    AttentionArgs a;
    a.q = contiguous(q.data() + cu_q[b] * Hq * D, DType::f32, {1, nq, Hq, D});
    a.k = contiguous(k.data() + cu_k[b] * Hkv * D, DType::f32, {1, nk, Hkv, D});
    a.v = contiguous(v.data() + cu_k[b] * Hkv * D, DType::f32, {1, nk, Hkv, D});
    a.out = contiguous(ref_out.data(), DType::f32, {1, nq, Hq, D});
    a.lse = contiguous(ref_lse.data(), DType::f32, {1, Hq, nq});
    a.key_lengths = contiguous(&kl, DType::i32, {1});
    a.causal = true;
    Context ctx;
    ctx.backend = Backend::reference;
    attention_forward(a, ctx);
    const std::vector<float> got(out.begin() + cu_q[b] * Hq * D,
                                 out.begin() + cu_q[b + 1] * Hq * D);
    EXPECT_LE(rel_l2(got, ref_out), 1e-5) << "sequence " << b;
    for (std::int64_t h = 0; h < Hq; ++h)
      for (std::int64_t i = 0; i < nq; ++i) {
        const float g = lse[static_cast<std::size_t>(h * Tq + cu_q[b] + i)];
        const float w = ref_lse[static_cast<std::size_t>(h * nq + i)];
        // lse's error is absolute (the log of a sum with a relative error): a relative bound
        // alone fails where lse is near 0 (0.00389 off by 7e-8 at one seed).
        EXPECT_TRUE(g == w || std::abs(g - w) <= 1e-5f * std::max(1.0f, std::abs(w)))
            << b << " " << h << " " << i << " got " << g << " ref " << w;
      }
  }
}

}  // namespace
}  // namespace tileattn::cli_test
