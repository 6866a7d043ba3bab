// Dropout: the Philox4x32-10 generator against the published known-answer vectors, keep-rate
// statistics of the decision, the documented (seed, offset, b, h, i, j) mapping, and that the
// forward and backward of every CPU path and of the reference drop exactly the documented
// elements (one-hot values make the forward's output show the keep mask).
#include <array>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "attention_case.hpp"
#include "common/philox.hpp"

namespace tileattn::test {
namespace {

using detail::DropoutParams;
using detail::Philox4x32;

TEST(Philox, KnownAnswers) {  // Random123's kat_vectors, philox4x32 with 10 rounds
  const struct {
    Philox4x32 counter;
    std::uint32_t key0, key1;
    Philox4x32 expected;
  } cases[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       0xffffffff,
       0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       0xa4093822,
       0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const auto& c : cases) {
    const Philox4x32 got = detail::philox4x32_10(c.counter, c.key0, c.key1);
    for (int n = 0; n < 4; ++n) EXPECT_EQ(got.v[n], c.expected.v[n]) << "word " << n;
  }
}

DropoutParams dropout_params(double p, std::uint64_t seed, std::uint64_t offset,
                             std::int64_t heads) {
  DropoutParams d;
  d.threshold = static_cast<std::uint32_t>(std::floor(p * 4294967296.0));
  d.keep_scale = 1.0f / (1.0f - static_cast<float>(p));
  d.seed = seed;
  d.offset = offset;
  d.heads_q = heads;
  return d;
}

TEST(Dropout, KeepRateAndIndependence) {
  TILEATTN_TRACE_SEED();
  Rng rng = make_rng();
  for (const double p : {0.05, 0.3, 0.5, 0.9}) {
    const DropoutParams d = dropout_params(p, rng(), rng(), 3);
    const double keep = 1.0 - static_cast<double>(d.threshold) / 4294967296.0;
    std::int64_t n = 0, kept = 0, pairs_kept = 0, word_kept[4] = {0, 0, 0, 0};
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t h = 0; h < 3; ++h)
        for (std::int64_t i = 0; i < 150; ++i) {
          bool previous = false;
          for (std::int64_t j = 0; j < 400; ++j) {
            const bool k = detail::dropout_keeps(d, b, h, i, j);
            kept += k;
            word_kept[j % 4] += k;
            if (j > 0) pairs_kept += k && previous;  // neighbours: P(both) = keep^2
            previous = k;
            ++n;
          }
        }
    // Five standard deviations of the binomial counts.
    const auto within = [](std::int64_t count, std::int64_t trials, double prob) {
      const double sd = std::sqrt(static_cast<double>(trials) * prob * (1.0 - prob));
      return std::abs(static_cast<double>(count) - static_cast<double>(trials) * prob) <= 5.0 * sd;
    };
    EXPECT_TRUE(within(kept, n, keep)) << "p " << p << ": kept " << kept << " of " << n;
    for (int w = 0; w < 4; ++w)
      EXPECT_TRUE(within(word_kept[w], n / 4, keep)) << "p " << p << ", word " << w;
    const std::int64_t pairs = n - n / 400;
    EXPECT_TRUE(within(pairs_kept, pairs, keep * keep)) << "p " << p << ": neighbour pairs";
  }
}

TEST(Dropout, DocumentedMapping) {
  TILEATTN_TRACE_SEED();
  Rng rng = make_rng();
  const std::uint64_t seed = rng(), offset = rng();
  const DropoutParams d = dropout_params(0.5, seed, offset, 5);
  // Words of (b, h, i, j) come from counter (j / 4, i, lo(s), hi(s)), s = offset + b * Hq + h,
  // key (lo(seed), hi(seed)); word j % 4 decides.
  for (const auto [b, h, i, j] : {std::array<std::int64_t, 4>{0, 0, 0, 0},
                                  {1, 3, 17, 258},
                                  {3, 4, 1000, 7},
                                  {2, 0, 5, 4095}}) {
    const std::uint64_t s = offset + static_cast<std::uint64_t>(b * 5 + h);
    const Philox4x32 words = detail::philox4x32_10(
        {{static_cast<std::uint32_t>(j / 4), static_cast<std::uint32_t>(i),
          static_cast<std::uint32_t>(s), static_cast<std::uint32_t>(s >> 32)}},
        static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
    EXPECT_EQ(detail::dropout_keeps(d, b, h, i, j), words.v[j % 4] >= d.threshold);
  }
  // The offset shifts the (b, h) stream: offset + B * Hq draws fresh masks for a whole call.
  const DropoutParams shifted = dropout_params(0.5, seed, offset + 1, 5);
  for (std::int64_t j = 0; j < 64; ++j)
    EXPECT_EQ(detail::dropout_keeps(shifted, 0, 2, 9, j), detail::dropout_keeps(d, 0, 3, 9, j));
  std::int64_t differ = 0;
  const DropoutParams next_call = dropout_params(0.5, seed, offset + 2 * 5, 5);
  for (std::int64_t j = 0; j < 256; ++j)
    differ += detail::dropout_keeps(next_call, 1, 4, 9, j) != detail::dropout_keeps(d, 1, 4, 9, j);
  EXPECT_GT(differ, 64) << "masks of consecutive calls should be independent";
}

// q = 0 makes every visible probability 1 / Lk, and v = identity (Dv = Lk) puts element (i, j)
// of the dropped probabilities at out[i][j]: out = keep(i, j) / (Lk (1 - p)).
struct MaskProblem {
  Case c;
  Problem problem;
  explicit MaskProblem(Rng& rng, float p) : c(make_case(p)), problem(c, DType::f32, rng) {
    problem.q.fill(0.0f);
    for (std::int64_t n = 0; n < problem.v.numel(); ++n)  // [B, Lk, Hkv, Dv]
      problem.v.set(n, n % c.Dv == n / (c.Dv * c.Hkv) % c.Lk ? 1.0f : 0.0f);
  }
  static Case make_case(float p) {
    Case c;
    c.B = 2, c.Lq = 37, c.Lk = 72, c.Hq = 3, c.Hkv = 1, c.D = 8, c.Dv = 72, c.dropout = p;
    return c;
  }
  DropoutParams params() const {
    return dropout_params(c.dropout, problem.dropout_seed, problem.dropout_offset, c.Hq);
  }
};

TEST(Dropout, ForwardDropsTheDocumentedElements) {
  TILEATTN_TRACE_SEED();
  Rng rng = make_rng();
  const MaskProblem mp(rng, 0.35f);
  const Case& c = mp.c;
  const DropoutParams d = mp.params();
  for (const auto& [backend, isa] : {std::pair{Backend::reference, CpuIsa::best},
                                     {Backend::cpu, CpuIsa::best},
                                     {Backend::cpu, CpuIsa::avx512},
                                     {Backend::cpu, CpuIsa::avx2},
                                     {Backend::cpu, CpuIsa::portable}}) {
    HostTensor out = mp.problem.make_out();
    Context ctx{backend, 2, isa};
    attention_forward(mp.problem.args(out, nullptr), ctx);
    std::int64_t wrong = 0, kept = 0;
    for (std::int64_t n = 0; n < out.numel(); ++n) {  // [B, Lq, Hq, Lk]
      const std::int64_t j = n % c.Lk, h = n / c.Lk % c.Hq, i = n / (c.Lk * c.Hq) % c.Lq,
                         b = n / (c.Lk * c.Hq * c.Lq);
      const bool expected = detail::dropout_keeps(d, b, h, i, j);
      const bool got = out.get(n) * static_cast<float>(c.Lk) > 0.5f * d.keep_scale;
      kept += got;
      if (got != expected && wrong++ == 0)
        ADD_FAILURE() << to_string(backend) << " " << to_string(isa) << ": element (b " << b
                      << ", h " << h << ", i " << i << ", j " << j << ") kept " << got;
      if (got) {
        EXPECT_NEAR(out.get(n), d.keep_scale / static_cast<float>(c.Lk), 1e-6f);
      }
    }
    EXPECT_EQ(wrong, 0) << to_string(backend) << " " << to_string(isa);
    EXPECT_GT(kept, 0);
  }
}

// The CPU backward uses the forward's mask: with q = 0 and v = identity, dv[j] = sum_i
// dropped(i, j) dout[i], where the dropped probabilities are read off the forward's output.
TEST(Dropout, BackwardUsesTheForwardsMask) {
  TILEATTN_TRACE_SEED();
  Rng rng = make_rng();
  const MaskProblem mp(rng, 0.6f);
  const Case& c = mp.c;
  for (const bool deterministic : {false, true}) {
    HostTensor out = mp.problem.make_out(), lse = mp.problem.make_lse();
    attention_forward(mp.problem.args(out, &lse), {Backend::cpu, 2});
    HostTensor dout = HostTensor::contiguous(DType::f32, {c.B, c.Lq, c.Hq, c.Dv});
    dout.fill_normal(rng);
    HostTensor dq = HostTensor::contiguous(DType::f32, {c.B, c.Lq, c.Hq, c.D}),
               dk = HostTensor::contiguous(DType::f32, {c.B, c.Lk, c.Hkv, c.D}),
               dv = HostTensor::contiguous(DType::f32, {c.B, c.Lk, c.Hkv, c.Dv});
    AttentionBackwardArgs a;
    static_cast<AttentionArgs&>(a) = mp.problem.args(out, &lse);
    a.dout = dout.view(), a.dq = dq.view(), a.dk = dk.view(), a.dv = dv.view();
    a.deterministic = deterministic;
    attention_backward(a, {Backend::cpu, 2});
    std::vector<float> expected(static_cast<std::size_t>(dv.numel()), 0.0f);
    for (std::int64_t b = 0; b < c.B; ++b)
      for (std::int64_t h = 0; h < c.Hq; ++h)
        for (std::int64_t i = 0; i < c.Lq; ++i)
          for (std::int64_t j = 0; j < c.Lk; ++j) {
            const float dropped = out.get(((b * c.Lq + i) * c.Hq + h) * c.Lk + j);
            for (std::int64_t e = 0; e < c.Dv; ++e)
              expected[static_cast<std::size_t>((b * c.Lk + j) * c.Dv + e)] +=
                  dropped * dout.get(((b * c.Lq + i) * c.Hq + h) * c.Dv + e);
          }
    const ErrorStats e = compare(dv.to_f32(), expected);
    EXPECT_LE(e.rel_l2, 1e-6) << "deterministic " << deterministic << ": " << e.str();
  }
}

}  // namespace
}  // namespace tileattn::test
