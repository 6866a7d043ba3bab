// See varlen_case.hpp.
#include "varlen_case.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tileattn::test {

void PrintTo(const VarlenCase& c, std::ostream* os) {
  *os << c.name;
}

std::vector<std::int32_t> offsets(const std::vector<std::int64_t>& lens) {
  std::vector<std::int32_t> cu{0};
  for (const std::int64_t l : lens) cu.push_back(static_cast<std::int32_t>(cu.back() + l));
  return cu;
}

HostTensor packed(DType dtype, std::int64_t total, std::int64_t H, std::int64_t D,
                  bool contiguous) {
  if (contiguous) return HostTensor::contiguous(dtype, {total, H, D});
  const std::int64_t head = D + 3, row = H * head + 5;
  return HostTensor(dtype, {total, H, D}, {row, head, 1});
}

HostTensor alone_operand(DType dtype, std::int64_t n, std::int64_t H, std::int64_t D,
                         bool contiguous) {
  if (contiguous) return HostTensor::contiguous(dtype, {1, n, H, D});
  const std::int64_t head = D + 3, row = H * head + 5;
  return HostTensor(dtype, {1, n, H, D}, {n * row, row, head, 1});
}

HostTensor slice_rows(const HostTensor& t, std::int64_t first, std::int64_t n, bool contiguous) {
  const std::int64_t H = t.shape()[1], D = t.shape()[2];
  HostTensor s = alone_operand(t.dtype(), n, H, D, contiguous);
  for (std::int64_t e = 0; e < n * H * D; ++e) s.set(e, t.get(first * H * D + e));
  return s;
}

VarlenProblem::VarlenProblem(const VarlenCase& vc, DType dt, Rng& rng)
    : c(vc), dtype(dt), B(static_cast<std::int64_t>(vc.len_q.size())) {
  cu_q = offsets(c.len_q);
  cu_k = offsets(c.len_k);
  total_q = cu_q.back(), total_k = cu_k.back();
  q = packed(dtype, total_q, c.Hq, c.D, c.contiguous);
  k = packed(dtype, total_k, c.Hkv, c.D, c.contiguous);
  v = packed(dtype, total_k, c.Hkv, c.Dv, c.contiguous);
  q.fill_normal(rng);
  k.fill_normal(rng);
  v.fill_normal(rng);
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t n = c.len_k[static_cast<std::size_t>(b)];
    const auto u = static_cast<std::int32_t>(c.seqused_k ? rng() % (n + 1) : n);
    used.push_back(u);
    // Keys behind key_lengths are never written in a KV cache: NaN there must not leak.
    for (std::int64_t j = cu_k[b] + u; c.poison_unused_keys && j < cu_k[b + 1]; ++j)
      for (std::int64_t e = 0; e < c.Hkv * c.D; ++e) {
        k.set(j * c.Hkv * c.D + e, NAN);
        if (e < c.Hkv * c.Dv) v.set(j * c.Hkv * c.Dv + e, NAN);
      }
    for (std::int64_t h = 0; h < c.Hq; ++h)
      slopes.push_back(0.05f + 0.3f * static_cast<float>(rng() % 1000) / 1000.0f);
  }
  out = packed(dtype, total_q, c.Hq, c.Dv, c.contiguous);
  lse = HostTensor(DType::f32, {c.Hq, total_q}, {total_q + 2, 1});
  dout = packed(dtype, total_q, c.Hq, c.Dv, c.contiguous);
  dout.fill_normal(rng);
  dq = packed(dtype, total_q, c.Hq, c.D, c.contiguous);
  dk = packed(dtype, total_k, c.Hkv, c.D, c.contiguous);
  dv = packed(dtype, total_k, c.Hkv, c.Dv, c.contiguous);
  seed = rng();
  offset = rng() % 1000;
}

namespace {
std::int64_t longest(const std::vector<std::int64_t>& lens) {
  return lens.empty() ? 0 : *std::max_element(lens.begin(), lens.end());
}
}  // namespace

std::int64_t VarlenProblem::max_q() const {
  return longest(c.len_q);
}

std::int64_t VarlenProblem::max_k() const {
  return longest(c.len_k);
}

void VarlenProblem::options(AttentionBackwardArgs& a) const {
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

AttentionBackwardArgs VarlenProblem::varlen_args() {
  AttentionBackwardArgs a;
  a.q = q.view(), a.k = k.view(), a.v = v.view(), a.out = out.view(), a.lse = lse.view();
  a.cu_seqlens_q = make_tensor(cu_q.data(), DType::i32, {B + 1});
  a.cu_seqlens_k = make_tensor(cu_k.data(), DType::i32, {B + 1});
  a.max_seqlen_q = max_q();
  a.max_seqlen_k = max_k();
  if (c.seqused_k) a.key_lengths = make_tensor(used.data(), DType::i32, {B});
  if (c.alibi) a.alibi_slopes = make_tensor(slopes.data(), DType::f32, {B, c.Hq});
  options(a);
  a.dout = dout.view(), a.dq = dq.view(), a.dk = dk.view(), a.dv = dv.view();
  return a;
}

SequenceCall::SequenceCall(const VarlenProblem& p, std::int64_t b) {
  const std::int64_t q0 = p.cu_q[b], nq = p.cu_q[b + 1] - q0;
  const std::int64_t k0 = p.cu_k[b], nk = p.cu_k[b + 1] - k0;
  const bool contiguous = p.c.contiguous;
  q = slice_rows(p.q, q0, nq, contiguous);
  k = slice_rows(p.k, k0, nk, contiguous);
  v = slice_rows(p.v, k0, nk, contiguous);
  dout = slice_rows(p.dout, q0, nq, contiguous);
  out = alone_operand(p.dtype, nq, p.c.Hq, p.c.Dv, contiguous);
  lse = HostTensor::contiguous(DType::f32, {1, p.c.Hq, nq});
  dq = alone_operand(p.dtype, nq, p.c.Hq, p.c.D, contiguous);
  dk = alone_operand(p.dtype, nk, p.c.Hkv, p.c.D, contiguous);
  dv = alone_operand(p.dtype, nk, p.c.Hkv, p.c.Dv, contiguous);
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

namespace {
bool same(float got, float want, float atol, float rtol) {
  if (got != got || want != want) return got != got && want != want;
  if (atol == 0.0f && rtol == 0.0f) return std::memcmp(&got, &want, sizeof got) == 0;
  return std::abs(got - want) <= atol + rtol * std::abs(want);
}
}  // namespace

void expect_rows_equal(const char* what, std::int64_t b, const HostTensor& packed_t,
                       std::int64_t first, const HostTensor& alone, float atol, float rtol) {
  const std::int64_t row = packed_t.shape()[1] * packed_t.shape()[2];
  std::int64_t mismatches = 0, first_bad = -1;
  for (std::int64_t e = 0; e < alone.numel(); ++e) {
    if (!same(packed_t.get(first * row + e), alone.get(e), atol, rtol)) {
      if (first_bad < 0) first_bad = e;
      ++mismatches;
    }
  }
  EXPECT_EQ(mismatches, 0) << what << " of sequence " << b << ": first at element " << first_bad
                           << " (row " << first + first_bad / std::max<std::int64_t>(row, 1) << ")";
}

void expect_lse_equal(const VarlenProblem& p, std::int64_t b, const HostTensor& alone_lse,
                      float atol) {
  const std::int64_t n = p.cu_q[b + 1] - p.cu_q[b];
  for (std::int64_t h = 0; h < p.c.Hq; ++h)
    for (std::int64_t i = 0; i < n; ++i) {
      const float got = p.lse.get(h * p.total_q + p.cu_q[b] + i);
      const float want = alone_lse.get(h * n + i);
      EXPECT_TRUE(same(got, want, atol, 0.0f) || got == want)
          << "lse of sequence " << b << " head " << h << " row " << i << ": " << got << " vs "
          << want;
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

}  // namespace tileattn::test
