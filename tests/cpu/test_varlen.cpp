// Packed variable-length batches (cu_seqlens) on the host backends: a varlen call equals each
// sequence run alone as a batch of one, bitwise, forward and backward, with every option that
// applies per sequence, NaN canaries in the padding between rows and in the keys behind
// key_lengths (seqused_k), sequences of length 0 and 1 and lengths that fill no block; and the
// argument errors of a varlen call.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "attention_case.hpp"

namespace tileattn::test {
namespace {

struct VarlenCase {
  std::string name;
  std::vector<std::int64_t> len_q, len_k;  // per sequence
  std::int64_t Hq = 4, Hkv = 2, D = 40, Dv = 40;
  bool causal = false;
  Alignment alignment = Alignment::bottom_right;
  std::int64_t window_left = -1, window_right = -1;
  bool seqused_k = false;  // key_lengths: a random count in [0, len_k] per sequence
  float softcap = 0.0f;
  bool alibi = false;  // [B, Hq] slopes
  float dropout = 0.0f;
};

void PrintTo(const VarlenCase& c, std::ostream* os) {
  *os << c.name;
}

std::vector<std::int32_t> offsets(const std::vector<std::int64_t>& lens) {
  std::vector<std::int32_t> cu{0};
  for (const std::int64_t l : lens) cu.push_back(static_cast<std::int32_t>(cu.back() + l));
  return cu;
}

// A packed [total, H, D] operand whose rows and heads have NaN-canary gaps between them.
HostTensor packed(DType dtype, std::int64_t total, std::int64_t H, std::int64_t D) {
  const std::int64_t head = D + 3, row = H * head + 5;
  return HostTensor(dtype, {total, H, D}, {row, head, 1});
}

// Rows [first, first + n) of a packed operand as a contiguous [1, n, H, D] tensor.
HostTensor slice_rows(const HostTensor& t, std::int64_t first, std::int64_t n) {
  const std::int64_t H = t.shape()[1], D = t.shape()[2];
  HostTensor s = HostTensor::contiguous(t.dtype(), {1, n, H, D});
  for (std::int64_t e = 0; e < n * H * D; ++e) s.set(e, t.get(first * H * D + e));
  return s;
}

struct VarlenProblem {
  const VarlenCase& c;
  DType dtype;
  std::int64_t B, total_q, total_k;
  std::vector<std::int32_t> cu_q, cu_k;
  std::vector<std::int32_t> used;  // key_lengths
  std::vector<float> slopes;       // [B, Hq]
  HostTensor q, k, v, out, lse, dout, dq, dk, dv;
  std::uint64_t seed, offset;

  VarlenProblem(const VarlenCase& vc, DType dt, Rng& rng)
      : c(vc), dtype(dt), B(static_cast<std::int64_t>(vc.len_q.size())) {
    cu_q = offsets(c.len_q);
    cu_k = offsets(c.len_k);
    total_q = cu_q.back(), total_k = cu_k.back();
    q = packed(dtype, total_q, c.Hq, c.D);
    k = packed(dtype, total_k, c.Hkv, c.D);
    v = packed(dtype, total_k, c.Hkv, c.Dv);
    q.fill_normal(rng);
    k.fill_normal(rng);
    v.fill_normal(rng);
    for (std::int64_t b = 0; b < B; ++b) {
      const std::int64_t n = c.len_k[static_cast<std::size_t>(b)];
      const auto u = static_cast<std::int32_t>(c.seqused_k ? rng() % (n + 1) : n);
      used.push_back(u);
      // Keys behind key_lengths are never written in a KV cache: NaN there must not leak.
      for (std::int64_t j = cu_k[b] + u; j < cu_k[b + 1]; ++j)
        for (std::int64_t e = 0; e < c.Hkv * c.D; ++e) {
          k.set(j * c.Hkv * c.D + e, NAN);
          if (e < c.Hkv * c.Dv) v.set(j * c.Hkv * c.Dv + e, NAN);
        }
      for (std::int64_t h = 0; h < c.Hq; ++h)
        slopes.push_back(0.05f + 0.3f * static_cast<float>(rng() % 1000) / 1000.0f);
    }
    out = packed(dtype, total_q, c.Hq, c.Dv);
    lse = HostTensor(DType::f32, {c.Hq, total_q}, {total_q + 2, 1});
    dout = packed(dtype, total_q, c.Hq, c.Dv);
    dout.fill_normal(rng);
    dq = packed(dtype, total_q, c.Hq, c.D);
    dk = packed(dtype, total_k, c.Hkv, c.D);
    dv = packed(dtype, total_k, c.Hkv, c.Dv);
    seed = rng();
    offset = rng() % 1000;
  }

  std::int64_t max_of(const std::vector<std::int64_t>& lens) const {
    return lens.empty() ? 0 : *std::max_element(lens.begin(), lens.end());
  }

  void options(AttentionBackwardArgs& a) const {
    a.deterministic = true;  // dq's summation order fixed: comparable bit for bit
    a.causal = c.causal;
    a.alignment = c.alignment;
    a.window_left = c.window_left;
    a.window_right = c.window_right;
    a.softcap = c.softcap;
    a.dropout_p = c.dropout;
    a.dropout_seed = seed;
    a.dropout_offset = offset;
  }

  AttentionBackwardArgs varlen_args() {
    AttentionBackwardArgs a;
    a.q = q.view(), a.k = k.view(), a.v = v.view(), a.out = out.view(), a.lse = lse.view();
    a.cu_seqlens_q = make_tensor(cu_q.data(), DType::i32, {B + 1});
    a.cu_seqlens_k = make_tensor(cu_k.data(), DType::i32, {B + 1});
    a.max_seqlen_q = max_of(c.len_q);
    a.max_seqlen_k = max_of(c.len_k);
    if (c.seqused_k) a.key_lengths = make_tensor(used.data(), DType::i32, {B});
    if (c.alibi) a.alibi_slopes = make_tensor(slopes.data(), DType::f32, {B, c.Hq});
    options(a);
    a.dout = dout.view(), a.dq = dq.view(), a.dk = dk.view(), a.dv = dv.view();
    return a;
  }
};

// Sequence b alone: contiguous copies of its rows, a batch of one with the same options.
struct SequenceCall {
  HostTensor q, k, v, out, lse, dout, dq, dk, dv;
  std::int32_t used;
  std::vector<float> slopes;
  AttentionBackwardArgs args;

  SequenceCall(const VarlenProblem& p, std::int64_t b) {
    const std::int64_t q0 = p.cu_q[b], nq = p.cu_q[b + 1] - q0;
    const std::int64_t k0 = p.cu_k[b], nk = p.cu_k[b + 1] - k0;
    q = slice_rows(p.q, q0, nq);
    k = slice_rows(p.k, k0, nk);
    v = slice_rows(p.v, k0, nk);
    dout = slice_rows(p.dout, q0, nq);
    out = HostTensor::contiguous(p.dtype, {1, nq, p.c.Hq, p.c.Dv});
    lse = HostTensor::contiguous(DType::f32, {1, p.c.Hq, nq});
    dq = HostTensor::contiguous(p.dtype, {1, nq, p.c.Hq, p.c.D});
    dk = HostTensor::contiguous(p.dtype, {1, nk, p.c.Hkv, p.c.D});
    dv = HostTensor::contiguous(p.dtype, {1, nk, p.c.Hkv, p.c.Dv});
    for (HostTensor* t : {&out, &lse, &dq, &dk, &dv}) t->poison();
    used = p.used[static_cast<std::size_t>(b)];
    slopes.assign(p.slopes.begin() + b * p.c.Hq, p.slopes.begin() + (b + 1) * p.c.Hq);
    args.q = q.view(), args.k = k.view(), args.v = v.view(), args.out = out.view();
    args.lse = lse.view();
    if (p.c.seqused_k) args.key_lengths = make_tensor(&used, DType::i32, {1});
    if (p.c.alibi) args.alibi_slopes = make_tensor(slopes.data(), DType::f32, {1, p.c.Hq});
    p.options(args);
    // Batch entry b of the padded batch draws from Philox stream offset + b * Hq + h.
    args.dropout_offset = p.offset + static_cast<std::uint64_t>(b * p.c.Hq);
    args.dout = dout.view(), args.dq = dq.view(), args.dk = dk.view(), args.dv = dv.view();
  }
};

// Packed rows [first, first + n) of `packed_t` equal the contiguous `alone` bit for bit.
void expect_rows_equal(const char* what, std::int64_t b, const HostTensor& packed_t,
                       std::int64_t first, const HostTensor& alone) {
  const std::int64_t row = packed_t.shape()[1] * packed_t.shape()[2];
  std::int64_t mismatches = 0, first_bad = -1;
  for (std::int64_t e = 0; e < alone.numel(); ++e) {
    const float got = packed_t.get(first * row + e), want = alone.get(e);
    if (std::memcmp(&got, &want, sizeof got) != 0 && !(got != got && want != want)) {
      if (first_bad < 0) first_bad = e;
      ++mismatches;
    }
  }
  EXPECT_EQ(mismatches, 0) << what << " of sequence " << b << ": first at element " << first_bad
                           << " (row " << first + first_bad / std::max<std::int64_t>(row, 1) << ")";
}

struct Target {
  Backend backend;
  CpuIsa isa;
};

std::vector<Target> targets() {
  std::vector<Target> t{{Backend::reference, CpuIsa::best}};
  for (const CpuIsa isa :
       {CpuIsa::amx_bf16, CpuIsa::avx512_bf16, CpuIsa::avx512, CpuIsa::avx2, CpuIsa::portable})
    if (isa_supported(isa)) t.push_back({Backend::cpu, isa});
  return t;
}

class Varlen : public ::testing::TestWithParam<VarlenCase> {};

TEST_P(Varlen, EqualsEachSequenceAloneBitwise) {
  TILEATTN_TRACE_SEED();
  Rng rng = make_rng();
  for (const DType dtype : {DType::f32, DType::bf16}) {
    for (const Target& target : targets()) {
      SCOPED_TRACE(std::string(to_string(dtype)) + " " + to_string(target.backend) + " " +
                   to_string(target.isa));
      VarlenProblem p(GetParam(), dtype, rng);
      for (HostTensor* t : {&p.out, &p.lse, &p.dq, &p.dk, &p.dv}) t->poison();
      Context ctx;
      ctx.backend = target.backend;
      ctx.cpu_isa = target.isa;
      ctx.threads = 2;
      AttentionBackwardArgs a = p.varlen_args();
      attention_forward(a, ctx);
      attention_backward(a, ctx);
      for (const HostTensor* t : {&p.out, &p.lse, &p.dq, &p.dk, &p.dv})
        EXPECT_TRUE(t->padding_intact()) << "a write outside the logical elements";
      for (std::int64_t b = 0; b < p.B; ++b) {
        SequenceCall s(p, b);
        attention_forward(s.args, ctx);
        attention_backward(s.args, ctx);
        expect_rows_equal("out", b, p.out, p.cu_q[b], s.out);
        expect_rows_equal("dq", b, p.dq, p.cu_q[b], s.dq);
        expect_rows_equal("dk", b, p.dk, p.cu_k[b], s.dk);
        expect_rows_equal("dv", b, p.dv, p.cu_k[b], s.dv);
        for (std::int64_t h = 0; h < p.c.Hq; ++h)
          for (std::int64_t i = 0; i < p.cu_q[b + 1] - p.cu_q[b]; ++i) {
            const float got = p.lse.get(h * p.total_q + p.cu_q[b] + i);
            const float want = s.lse.get(h * (p.cu_q[b + 1] - p.cu_q[b]) + i);
            EXPECT_TRUE(got == want || (got != got && want != want))
                << "lse of sequence " << b << " head " << h << " row " << i << ": " << got << " vs "
                << want;
          }
      }
      // Every output element was written (the poison is NaN; no canary in these inputs is
      // visible, so a NaN left means an unwritten element).
      EXPECT_EQ(p.out.count_nan(), 0);
      EXPECT_EQ(p.dq.count_nan(), 0);
      EXPECT_EQ(p.dk.count_nan(), 0);
      EXPECT_EQ(p.dv.count_nan(), 0);
    }
  }
}

std::vector<VarlenCase> varlen_cases() {
  std::vector<VarlenCase> cases;
  const auto add = [&](std::string name, auto tweak) {
    VarlenCase c;
    c.name = std::move(name);
    c.len_q = {37, 0, 1, 130, 64, 9};
    c.len_k = {37, 5, 1, 130, 64, 0};
    tweak(c);
    cases.push_back(c);
  };
  add("plain", [](VarlenCase&) {});
  add("causal_bottom_right", [](VarlenCase& c) { c.causal = true; });
  add("causal_top_left", [](VarlenCase& c) {
    c.causal = true;
    c.alignment = Alignment::top_left;
  });
  add("lq_ne_lk_causal", [](VarlenCase& c) {
    c.len_q = {3, 70, 1, 0, 33};
    c.len_k = {90, 17, 200, 4, 33};
    c.causal = true;
  });
  add("window", [](VarlenCase& c) {
    c.window_left = 11;
    c.window_right = 3;
  });
  add("seqused_k", [](VarlenCase& c) {
    c.seqused_k = true;
    c.causal = true;
  });
  add("softcap_alibi", [](VarlenCase& c) {
    c.softcap = 5.0f;
    c.alibi = true;
  });
  add("dropout", [](VarlenCase& c) { c.dropout = 0.25f; });
  add("mqa_dv", [](VarlenCase& c) {
    c.Hkv = 1;
    c.Dv = 24;
  });
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cpu, Varlen, ::testing::ValuesIn(varlen_cases()),
                         [](const auto& param_info) { return param_info.param.name; });

// ---- Errors ------------------------------------------------------------------------------------

struct ErrorFixture {
  std::vector<std::int32_t> cu_q{0, 3, 7}, cu_k{0, 4, 9};
  HostTensor q = HostTensor::contiguous(DType::f32, {7, 2, 8});
  HostTensor k = HostTensor::contiguous(DType::f32, {9, 2, 8});
  HostTensor v = HostTensor::contiguous(DType::f32, {9, 2, 8});
  HostTensor out = HostTensor::contiguous(DType::f32, {7, 2, 8});
  AttentionArgs args() {
    AttentionArgs a;
    a.q = q.view(), a.k = k.view(), a.v = v.view(), a.out = out.view();
    a.cu_seqlens_q = make_tensor(cu_q.data(), DType::i32, {3});
    a.cu_seqlens_k = make_tensor(cu_k.data(), DType::i32, {3});
    a.max_seqlen_q = 4;
    a.max_seqlen_k = 5;
    return a;
  }
};

TEST(VarlenErrors, RefusedWithTheArgumentNamed) {
  ErrorFixture f;
  attention_forward(f.args());  // the fixture itself is valid
  const auto expect = [&](auto tweak, const char* argument, const char* fragment) {
    AttentionArgs a = f.args();
    tweak(a);
    expect_argument_error([&] { attention_forward(a); }, argument, fragment);
  };
  std::vector<std::int32_t> descending{0, 3, 2}, not_zero{1, 3, 7}, short_total{0, 3, 6};
  expect(
      [&](AttentionArgs& a) { a.cu_seqlens_q = make_tensor(descending.data(), DType::i32, {3}); },
      "cu_seqlens_q", "non-decreasing");
  expect([&](AttentionArgs& a) { a.cu_seqlens_q = make_tensor(not_zero.data(), DType::i32, {3}); },
         "cu_seqlens_q", "start at 0");
  expect(
      [&](AttentionArgs& a) { a.cu_seqlens_q = make_tensor(short_total.data(), DType::i32, {3}); },
      "cu_seqlens_q", "ends at 6");
  expect([&](AttentionArgs& a) { a.max_seqlen_q = 3; }, "max_seqlen_q", "sequence 1 has 4");
  expect([&](AttentionArgs& a) { a.max_seqlen_k = 4; }, "max_seqlen_k", "sequence 1 has 5");
  expect([&](AttentionArgs& a) { a.cu_seqlens_k = Tensor{}; }, "cu_seqlens_k", "required");
  expect([&](AttentionArgs& a) { a.cu_seqlens_k = make_tensor(f.cu_k.data(), DType::i32, {2}); },
         "cu_seqlens_k", "entries");
  std::vector<std::int64_t> wide{0, 3, 7};
  expect([&](AttentionArgs& a) { a.cu_seqlens_q = make_tensor(wide.data(), DType::i64, {3}); },
         "cu_seqlens_q", "i32");
  HostTensor q4 = HostTensor::contiguous(DType::f32, {1, 7, 2, 8});
  expect([&](AttentionArgs& a) { a.q = q4.view(); }, "q", "[total_q, Hq, D]");
  std::vector<std::uint8_t> mask(7 * 9, 1);
  expect(
      [&](AttentionArgs& a) {
        a.mask = make_tensor(mask.data(), DType::boolean, {7, 9});
      },
      "mask", "varlen");
  std::vector<std::int32_t> used{2, 6};
  expect([&](AttentionArgs& a) { a.key_lengths = make_tensor(used.data(), DType::i32, {2}); },
         "key_lengths", "sequence b's key count");
  std::vector<float> lse(7 * 2);
  expect(
      [&](AttentionArgs& a) {
        a.lse = make_tensor(lse.data(), DType::f32, {7, 2});
      },
      "lse", "dimension 0");
  expect(
      [&](AttentionArgs& a) {
        a.out = make_tensor(f.cu_q.data(), DType::f32, {7, 2, 8});
      },
      "cu_seqlens_q", "overlaps out");
}

}  // namespace
}  // namespace tileattn::test
