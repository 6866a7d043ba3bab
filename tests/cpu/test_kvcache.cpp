// attention_with_kvcache and apply_rotary on the host backends: every option against an oracle
// built by the test (keys gathered from the cache and rotated by the test's own RoPE, then the
// reference backend on a dense batch of one); the append writes exactly the intended rows and
// pages; a permuted page table gives bitwise the contiguous result; unwritten pages and rows
// hold NaN throughout; split counts agree; argument errors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kvcache_case.hpp"

namespace tileattn::test {
namespace {

struct Target {
  Backend backend;
  CpuIsa isa;
};

std::vector<Target> targets() {
  std::vector<Target> t{{Backend::reference, CpuIsa::best}};
  for (const CpuIsa isa : {CpuIsa::avx512_bf16, CpuIsa::avx512, CpuIsa::avx2, CpuIsa::portable})
    if (isa_supported(isa)) t.push_back({Backend::cpu, isa});
  return t;
}

std::vector<KvCase> cases() {
  std::vector<KvCase> v;
  KvCase c;
  c.name = "decode_contiguous";
  c.cache_len = {100, 7, 300};
  c.len_q = {1};
  c.len_new = 1;
  v.push_back(c);

  c = KvCase{};
  c.name = "paged16_rotary_half";
  c.cache_len = {33, 250};
  c.len_q = {1};
  c.len_new = 1;
  c.block_size = 16;
  c.rotary_dim = 64;
  v.push_back(c);

  c = KvCase{};
  c.name = "paged1_rotary_interleaved_causal_lq3";
  c.cache_len = {5, 40};
  c.len_q = {3};
  c.len_new = 3;
  c.block_size = 1;
  c.rotary_dim = 32;
  c.interleaved = true;
  c.causal = true;
  v.push_back(c);

  c = KvCase{};
  c.name = "paged64_window_speculative_lq4";
  c.cache_len = {200, 63, 64};
  c.len_q = {4};
  c.len_new = 4;
  c.block_size = 64;
  c.causal = true;
  c.window_left = 37;
  c.Hq = 4;
  c.Hkv = 4;
  v.push_back(c);

  c = KvCase{};
  c.name = "paged256_softcap_alibi_no_append";
  c.cache_len = {700, 1};
  c.len_q = {1};
  c.block_size = 256;
  c.softcap = 5.0f;
  c.alibi = true;
  v.push_back(c);

  c = KvCase{};
  c.name = "batch_idx_mqa_d128_dv64_splits3";
  c.cache_len = {90, 500, 0};
  c.len_q = {2};
  c.len_new = 2;
  c.batch_idx = true;
  c.Hq = 8;
  c.Hkv = 1;
  c.D = 128;
  c.Dv = 64;
  c.num_splits = 3;
  v.push_back(c);

  c = KvCase{};
  c.name = "varlen_chunked_prefill_paged16";
  c.varlen = true;
  c.cache_len = {10, 4, 130};
  c.len_q = {5, 0, 70};
  c.len_new_varlen = {5, 0, 70};
  c.block_size = 16;
  c.causal = true;
  c.rotary_dim = 48;
  v.push_back(c);

  c = KvCase{};
  c.name = "varlen_verify_no_append";
  c.varlen = true;
  c.cache_len = {77, 300};
  c.len_q = {3, 1};
  c.causal = true;
  v.push_back(c);

  c = KvCase{};
  c.name = "odd_dims_d40_dv24_paged16";
  c.cache_len = {45, 17};
  c.len_q = {2};
  c.len_new = 2;
  c.block_size = 16;
  c.D = 40;
  c.Dv = 24;
  c.causal = true;
  v.push_back(c);

  c = KvCase{};
  c.name = "first_token_empty_cache";
  c.cache_len = {0, 0};
  c.len_q = {1};
  c.len_new = 1;
  c.rotary_dim = 16;
  v.push_back(c);

  c = KvCase{};
  c.name = "no_keys_at_all";
  c.cache_len = {0, 3};
  c.len_q = {1};
  c.block_size = 16;
  v.push_back(c);

  c = KvCase{};
  c.name = "long_mha_d256_splits7";
  c.cache_len = {1000};
  c.len_q = {1};
  c.len_new = 1;
  c.Hq = 2;
  c.Hkv = 2;
  c.D = 256;
  c.Dv = 256;
  c.num_splits = 7;
  v.push_back(c);

  c = KvCase{};
  c.name = "left_padded_paged16_causal_alibi_rotary_lq2";
  c.cache_len = {40, 300, 5, 0};
  c.leftpad = {7, 290, 7, 0};  // 290: all but the last keys of a long split sequence; 7: all
  c.len_q = {2};
  c.len_new = 2;
  c.block_size = 16;
  c.rotary_dim = 32;
  c.causal = true;
  c.alibi = true;
  c.window_left = 6;
  v.push_back(c);

  c.name = "left_padded_contiguous_splits3";
  c.block_size = 0;
  c.window_left = -1;
  c.num_splits = 3;
  v.push_back(c);
  return v;
}

void run(KvProblem& p, const Target& target, int threads = 2) {
  p.out.poison();
  p.lse.poison();
  Context ctx;
  ctx.backend = target.backend;
  ctx.cpu_isa = target.isa;
  ctx.threads = threads;
  attention_with_kvcache(p.args(), ctx);
}

class KvCache : public ::testing::TestWithParam<KvCase> {};

TEST_P(KvCache, MatchesOracleAndAppendsExactly) {
  TILEATTN_TRACE_SEED();
  Rng rng = make_rng();
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const Target& target : targets()) {
      SCOPED_TRACE(std::string(to_string(dtype)) + " " + to_string(target.backend) + " " +
                   to_string(target.isa));
      KvProblem p(GetParam(), dtype, rng);
      run(p, target);
      expect_matches_oracle(p, 2e-6, 8e-3, 2e-5);
      expect_append_exact(p);
    }
  }
}

TEST_P(KvCache, SplitCountsAgree) {
  TILEATTN_TRACE_SEED();
  Rng rng = make_rng();
  KvCase c = GetParam();
  std::vector<float> first;
  for (const int splits : {1, 2, 5, 32}) {
    c.num_splits = splits;
    Rng same = rng;  // the same problem for every split count
    KvProblem p(c, DType::bf16, same);
    run(p, {Backend::cpu, CpuIsa::best});
    expect_matches_oracle(p, 2e-6, 8e-3, 2e-5);
    if (first.empty()) {
      first = p.out.to_f32();
      continue;
    }
    const ErrorStats e = compare(p.out.to_f32(), first);
    EXPECT_LE(e.rel_l2, 2e-6) << "num_splits " << splits << ": " << e.str();
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, KvCache, ::testing::ValuesIn(cases()),
                         [](const auto& param_info) { return param_info.param.name; });

// The same logical cache contiguous, paged in one order and paged in another: bitwise the same
// result (the pages only change where rows live).
TEST(KvCacheLayout, PermutedPagesEqualContiguousBitwise) {
  TILEATTN_TRACE_SEED();
  Rng rng = make_rng();
  KvCase c;
  c.cache_len = {300, 45, 129};
  c.len_q = {2};
  c.causal = true;
  c.block_size = 16;
  c.rotary_dim = 64;
  for (const std::int64_t block :
       {std::int64_t{1}, std::int64_t{16}, std::int64_t{64}, std::int64_t{256}}) {
    SCOPED_TRACE("block_size " + std::to_string(block));
    c.block_size = block;
    KvProblem paged(c, DType::bf16, rng);
    KvProblem relaid = paged;  // another page order of the same rows
    std::vector<std::int32_t> perm(static_cast<std::size_t>(paged.k_cache.shape()[0]));
    for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<std::int32_t>(i);
    std::shuffle(perm.begin(), perm.end(), rng);
    const std::int64_t row_elems_k = c.block_size * c.Hkv * c.D,
                       row_elems_v = c.block_size * c.Hkv * c.Dv;
    for (std::size_t blk = 0; blk < perm.size(); ++blk)
      for (std::int64_t e = 0; e < row_elems_k; ++e)
        relaid.k_cache.set(perm[blk] * row_elems_k + e,
                           paged.k_cache.get(static_cast<std::int64_t>(blk) * row_elems_k + e));
    for (std::size_t blk = 0; blk < perm.size(); ++blk)
      for (std::int64_t e = 0; e < row_elems_v; ++e)
        relaid.v_cache.set(perm[blk] * row_elems_v + e,
                           paged.v_cache.get(static_cast<std::int64_t>(blk) * row_elems_v + e));
    for (std::int32_t& entry : relaid.block_table)
      if (entry >= 0) entry = perm[static_cast<std::size_t>(entry)];
    // The contiguous cache: sequence b's keys in entry b.
    KvCase cc = c;
    cc.block_size = 0;
    KvProblem flat(cc, DType::bf16, rng);
    flat.q = paged.q;
    for (std::int64_t b = 0; b < paged.B; ++b)
      for (std::int64_t j = 0; j < c.cache_len[static_cast<std::size_t>(b)]; ++j) {
        const std::int64_t from = paged.cache_row(b, j), to = flat.cache_row(b, j);
        for (std::int64_t e = 0; e < c.Hkv * c.D; ++e)
          flat.k_cache.set(to * c.Hkv * c.D + e, paged.k_cache.get(from * c.Hkv * c.D + e));
        for (std::int64_t e = 0; e < c.Hkv * c.Dv; ++e)
          flat.v_cache.set(to * c.Hkv * c.Dv + e, paged.v_cache.get(from * c.Hkv * c.Dv + e));
      }
    for (const Target& target : targets()) {
      if (target.backend == Backend::reference) continue;
      SCOPED_TRACE(to_string(target.isa));
      run(paged, target);
      run(relaid, target);
      run(flat, target);
      EXPECT_EQ(paged.out.bytes(), relaid.out.bytes()) << "a permuted page table changed out";
      EXPECT_EQ(paged.out.bytes(), flat.out.bytes()) << "paged and contiguous caches differ";
      EXPECT_EQ(paged.lse.bytes(), flat.lse.bytes()) << "paged and contiguous lse differ";
    }
  }
}

// NaN in every cache row that holds no key (KvProblem's construction) must not reach any
// result; a NaN in a key a row does see poisons exactly the rows of its kv head group.
TEST(KvCacheNonFinite, VisibleNaNPoisonsItsGroupOnly) {
  TILEATTN_TRACE_SEED();
  Rng rng = make_rng();
  KvCase c;
  c.cache_len = {80, 80};
  c.len_q = {1};
  c.block_size = 16;
  c.Hq = 4;
  c.Hkv = 2;
  for (const Target& target : targets()) {
    SCOPED_TRACE(std::string(to_string(target.backend)) + " " + to_string(target.isa));
    KvProblem p(c, DType::f32, rng);
    // Sequence 1, kv head 0, key 41: a NaN in V.
    const std::int64_t row = p.cache_row(1, 41);
    p.v_cache.set((row * c.Hkv + 0) * c.Dv + 5, std::numeric_limits<float>::quiet_NaN());
    run(p, target);
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t h = 0; h < c.Hq; ++h) {
        const bool poisoned = b == 1 && h / 2 == 0;
        const float lse = p.lse.get(b * c.Hq + h);
        EXPECT_EQ(std::isnan(lse), poisoned) << "sequence " << b << " head " << h;
        for (std::int64_t d = 0; d < c.Dv; ++d)
          ASSERT_EQ(std::isnan(p.out.get((b * c.Hq + h) * c.Dv + d)), poisoned)
              << "sequence " << b << " head " << h << " dim " << d;
      }
  }
}

// An infinite K element of a visible key gives a -inf score for a query of the opposite sign and
// +inf for one of the same sign: both poison their rows (a -inf score is not a masked key).
// The CPU decode kernel's finding by fuzz_kvcache (finding-cpu-decode-inf-k-minus-inf-score).
TEST(KvCacheNonFinite, InfiniteKeyElementPoisonsRowsOfEitherSign) {
  TILEATTN_TRACE_SEED();
  Rng rng = make_rng();
  KvCase c;
  c.cache_len = {30, 30};
  c.len_q = {1};
  c.Hq = 4;
  c.Hkv = 2;
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16})
    for (const Target& target : targets()) {
      SCOPED_TRACE(std::string(to_string(dtype)) + " " + to_string(target.backend) + " " +
                   to_string(target.isa));
      KvProblem p(c, dtype, rng);
      // Sequence 1, kv head 0 (query heads 0 and 1), key 7, dim 3: +inf; q's dim 3 is -1 for
      // head 0 (score -inf) and +1 for head 1 (score +inf).
      p.k_cache.set((p.cache_row(1, 7) * c.Hkv + 0) * c.D + 3,
                    std::numeric_limits<float>::infinity());
      p.q.set((1 * c.Hq + 0) * c.D + 3, -1.0f);
      p.q.set((1 * c.Hq + 1) * c.D + 3, 1.0f);
      run(p, target);
      for (std::int64_t b = 0; b < 2; ++b)
        for (std::int64_t h = 0; h < c.Hq; ++h) {
          const bool poisoned = b == 1 && h / 2 == 0;
          EXPECT_EQ(std::isnan(p.lse.get(b * c.Hq + h)), poisoned)
              << "sequence " << b << " head " << h;
          EXPECT_EQ(std::isnan(p.out.get((b * c.Hq + h) * c.Dv)), poisoned)
              << "sequence " << b << " head " << h;
        }
    }
}

// A NaN in V at a causal edge key that the first query row does not see but the last does.
TEST(KvCacheNonFinite, CausalEdgeNaNReachesOnlyRowsThatSeeIt) {
  TILEATTN_TRACE_SEED();
  Rng rng = make_rng();
  KvCase c;
  c.cache_len = {60};
  c.len_q = {4};
  c.len_new = 4;
  c.causal = true;
  c.Hq = 2;
  c.Hkv = 1;
  for (const Target& target : targets()) {
    SCOPED_TRACE(std::string(to_string(target.backend)) + " " + to_string(target.isa));
    KvProblem p(c, DType::f32, rng);
    // New key 2 (absolute 62) is seen by query rows 2 and 3 only.
    p.v_new.set((2 * c.Hkv + 0) * c.Dv + 1, std::numeric_limits<float>::infinity());
    run(p, target);
    for (std::int64_t i = 0; i < 4; ++i)
      for (std::int64_t h = 0; h < c.Hq; ++h)
        EXPECT_EQ(std::isnan(p.out.get((i * c.Hq + h) * c.Dv)), i >= 2)
            << "row " << i << " head " << h;
  }
}

TEST(KvCacheErrors, RefusesWhatItCannotHonour) {
  Rng rng = make_rng();
  KvCase c;
  c.cache_len = {10, 20};
  c.len_q = {1};
  c.len_new = 1;
  c.block_size = 16;
  KvProblem p(c, DType::f32, rng);
  {
    KvCacheArgs a = p.args();
    a.cache_seqlens = Tensor{};
    expect_argument_error([&] { attention_with_kvcache(a); }, "cache_seqlens", "required");
  }
  {
    std::vector<std::int32_t> full{10, static_cast<std::int32_t>(p.capacity)};
    KvCacheArgs a = p.args();
    a.cache_seqlens = make_tensor(full.data(), DType::i32, {2});
    expect_argument_error([&] { attention_with_kvcache(a); }, "cache_seqlens", "capacity");
  }
  {
    std::vector<std::int32_t> table = p.block_table;
    table[0] = static_cast<std::int32_t>(p.k_cache.shape()[0]);
    KvCacheArgs a = p.args();
    a.block_table = make_tensor(table.data(), DType::i32, {2, p.capacity / 16});
    expect_argument_error([&] { attention_with_kvcache(a); }, "block_table", "expected a block");
  }
  {
    KvCacheArgs a = p.args();
    a.v_new = Tensor{};
    expect_argument_error([&] { attention_with_kvcache(a); }, "v_new", "together");
  }
  {
    KvCacheArgs a = p.args();
    a.out = a.q;
    expect_argument_error([&] { attention_with_kvcache(a); }, "out", "");
  }
  {
    KvCacheArgs a = p.args();
    a.out = p.k_cache.view();
    expect_argument_error([&] { attention_with_kvcache(a); }, "out", "");
  }
  {
    KvCacheArgs a = p.args();
    a.k_new = p.k_cache.view();
    expect_argument_error([&] { attention_with_kvcache(a); }, "k_new", "");
  }
  {
    KvCacheArgs a = p.args();
    a.num_splits = -1;
    expect_argument_error([&] { attention_with_kvcache(a); }, "num_splits", "");
  }
  {
    HostTensor cos = HostTensor::contiguous(DType::f32, {4, 8});
    HostTensor sin = HostTensor::contiguous(DType::f32, {4, 8});
    cos.fill(1.0f);
    sin.fill(0.0f);
    KvCacheArgs a = p.args();
    a.rotary_cos = cos.view();
    a.rotary_sin = sin.view();
    expect_argument_error([&] { attention_with_kvcache(a); }, "rotary_cos", "positions");
  }
  {
    KvCacheArgs a = p.args();
    a.k_cache.dtype = DType::bf16;
    expect_argument_error([&] { attention_with_kvcache(a); }, "k_cache", "dtype");
  }
}

// ---- apply_rotary -------------------------------------------------------------------------------

// RoPE in double from the angle itself: the independent check of both conventions.
double rope_double(const std::vector<double>& x, std::int64_t rd, bool interleaved,
                   std::int64_t pos, std::int64_t e) {
  const std::int64_t half = rd / 2;
  if (e >= rd) return x[static_cast<std::size_t>(e)];
  const std::int64_t i = interleaved ? e / 2 : e % half;
  const bool second = interleaved ? e % 2 == 1 : e >= half;
  const double angle = static_cast<double>(pos) *
                       std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(rd));
  const std::int64_t ia = interleaved ? 2 * i : i, ib = interleaved ? 2 * i + 1 : i + half;
  const double a = x[static_cast<std::size_t>(ia)], b = x[static_cast<std::size_t>(ib)];
  return second ? a * std::sin(angle) + b * std::cos(angle)
                : a * std::cos(angle) - b * std::sin(angle);
}

TEST(ApplyRotary, MatchesDoublePrecisionRope) {
  TILEATTN_TRACE_SEED();
  Rng rng = make_rng();
  for (const bool interleaved : {false, true})
    for (const DType dtype : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string(interleaved ? "interleaved " : "half-split ") + to_string(dtype));
      const std::int64_t B = 2, L = 37, H = 3, D = 72, rd = 48, positions = 300;
      const std::vector<std::int32_t> offsets{5, 200};
      HostTensor x = HostTensor::operand(dtype, B, L, H, D, Layout::padded_bshd);
      x.fill_normal(rng);
      HostTensor out = HostTensor::operand(dtype, B, L, H, D, Layout::padded_bshd);
      out.poison();
      HostTensor cos = HostTensor::contiguous(DType::f32, {positions, rd / 2});
      HostTensor sin = HostTensor::contiguous(DType::f32, {positions, rd / 2});
      for (std::int64_t p = 0; p < positions; ++p)
        for (std::int64_t i = 0; i < rd / 2; ++i) {
          const double angle =
              static_cast<double>(p) *
              std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(rd));
          cos.set(p * (rd / 2) + i, static_cast<float>(std::cos(angle)));
          sin.set(p * (rd / 2) + i, static_cast<float>(std::sin(angle)));
        }
      RotaryArgs a;
      a.x = x.view();
      a.out = out.view();
      a.cos = cos.view();
      a.sin = sin.view();
      a.interleaved = interleaved;
      a.seqlen_offsets = make_tensor(offsets.data(), DType::i32, {B});
      apply_rotary(a);
      EXPECT_TRUE(out.padding_intact());
      // Half an ulp of the storage plus the f32 table's rounding.
      const double ulp = dtype == DType::f32 ? 1.2e-7 : 7.9e-3;
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t l = 0; l < L; ++l)
          for (std::int64_t h = 0; h < H; ++h) {
            std::vector<double> row(static_cast<std::size_t>(D));
            const std::int64_t base = ((b * L + l) * H + h) * D;
            for (std::int64_t d = 0; d < D; ++d) row[static_cast<std::size_t>(d)] = x.get(base + d);
            for (std::int64_t d = 0; d < D; ++d) {
              const double want =
                  rope_double(row, rd, interleaved, offsets[static_cast<std::size_t>(b)] + l, d);
              ASSERT_NEAR(out.get(base + d), want, 4e-6 + ulp * std::abs(want))
                  << "b " << b << " l " << l << " h " << h << " d " << d;
            }
          }
      // In place gives the same bits.
      a.out = a.x;
      apply_rotary(a);
      for (std::int64_t e = 0; e < x.numel(); ++e) ASSERT_EQ(x.get(e), out.get(e)) << e;
    }
}

TEST(ApplyRotary, RefusesPartialOverlapAndShortTables) {
  HostTensor x = HostTensor::contiguous(DType::f32, {1, 8, 2, 16});
  x.fill(1.0f);
  HostTensor cos = HostTensor::contiguous(DType::f32, {4, 8});
  HostTensor sin = HostTensor::contiguous(DType::f32, {4, 8});
  cos.fill(1.0f);
  sin.fill(0.0f);
  RotaryArgs a;
  a.x = x.view();
  a.out = x.view();
  a.cos = cos.view();
  a.sin = sin.view();
  expect_argument_error([&] { apply_rotary(a); }, "cos", "positions");
  HostTensor big_cos = HostTensor::contiguous(DType::f32, {16, 8});
  HostTensor big_sin = HostTensor::contiguous(DType::f32, {16, 8});
  a.cos = big_cos.view();
  a.sin = big_sin.view();
  a.out.data = static_cast<char*>(a.out.data) + 4;
  a.out.shape[1] = 7;
  a.x.shape[1] = 7;
  expect_argument_error([&] { apply_rotary(a); }, "out", "same view");
  HostTensor wide = HostTensor::contiguous(DType::f32, {16, 9});
  a = RotaryArgs{};
  a.x = x.view();
  a.out = x.view();
  a.cos = wide.view();
  a.sin = wide.view();
  expect_argument_error([&] { apply_rotary(a); }, "cos", "rotary_dim");
}

}  // namespace
}  // namespace tileattn::test
