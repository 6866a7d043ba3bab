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
#include "varlen_case.hpp"

namespace tileattn::test {
namespace {

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
        expect_lse_equal(p, b, s.lse);
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
