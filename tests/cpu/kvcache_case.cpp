#include "kvcache_case.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

namespace tileattn::test {

void PrintTo(const KvCase& c, std::ostream* os) {
  *os << c.name;
}

namespace {

Tensor i32_view(const std::vector<std::int32_t>& v) {
  return make_tensor(v.data(), DType::i32, {static_cast<std::int64_t>(v.size())});
}

std::vector<std::int32_t> prefix_offsets(const std::vector<std::int64_t>& lens) {
  std::vector<std::int32_t> off{0};
  for (const std::int64_t n : lens) off.push_back(off.back() + static_cast<std::int32_t>(n));
  return off;
}

}  // namespace

void rope_f32(float* x, std::int64_t rotary_dim, bool interleaved, const HostTensor& cos,
              const HostTensor& sin, std::int64_t pos) {
  const std::int64_t half = rotary_dim / 2;
  for (std::int64_t i = 0; i < half; ++i) {
    const float c = cos.get(pos * half + i), s = sin.get(pos * half + i);
    const std::int64_t ia = interleaved ? 2 * i : i, ib = interleaved ? 2 * i + 1 : i + half;
    const float a = x[ia], b = x[ib];
    x[ia] = a * c - b * s;
    x[ib] = a * s + b * c;
  }
}

KvProblem::KvProblem(const KvCase& kc, DType dt, Rng& rng, DType out_dtype) : c(kc), dtype(dt) {
  B = static_cast<std::int64_t>(c.cache_len.size());
  std::int64_t most = 0, most_q = 0;
  for (std::int64_t b = 0; b < B; ++b) {
    most = std::max(most, c.cache_len[static_cast<std::size_t>(b)] + new_count(b));
    most_q = std::max(most_q, query_rows(b));
  }
  capacity = most + 2;
  std::int64_t blocks = 0, rows_per_block = 0;
  if (c.block_size > 0) {
    const std::int64_t per_seq = (capacity + c.block_size - 1) / c.block_size;
    capacity = per_seq * c.block_size;
    blocks = B * per_seq + 3;
    rows_per_block = c.block_size;
    std::vector<std::int32_t> perm(static_cast<std::size_t>(blocks));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    block_table.assign(static_cast<std::size_t>(B * per_seq), -1);
    for (std::int64_t b = 0; b < B; ++b) {
      const std::int64_t used = c.cache_len[static_cast<std::size_t>(b)] + new_count(b);
      // Entries past the pages a sequence uses stay -1: the library must not read them.
      for (std::int64_t p = 0; p * c.block_size < used; ++p)
        block_table[static_cast<std::size_t>(b * per_seq + p)] =
            perm[static_cast<std::size_t>(b * per_seq + p)];
    }
  } else {
    blocks = B + (c.batch_idx ? 2 : 0);
    rows_per_block = capacity;
    if (c.batch_idx) {
      std::vector<std::int32_t> perm(static_cast<std::size_t>(blocks));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      batch_idx.assign(perm.begin(), perm.begin() + B);
    }
  }
  k_cache = HostTensor::contiguous(dtype, {blocks, rows_per_block, c.Hkv, c.D});
  v_cache = HostTensor::contiguous(dtype, {blocks, rows_per_block, c.Hkv, c.Dv});
  k_cache.fill_normal(rng);
  v_cache.fill_normal(rng);
  std::vector<bool> holds(static_cast<std::size_t>(blocks * rows_per_block), false);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t j = 0; j < c.cache_len[static_cast<std::size_t>(b)]; ++j)
      holds[static_cast<std::size_t>(cache_row(b, j))] = true;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (std::int64_t r = 0; r < blocks * rows_per_block; ++r) {
    if (holds[static_cast<std::size_t>(r)]) continue;
    for (std::int64_t e = 0; e < c.Hkv * c.D; ++e) k_cache.set(r * c.Hkv * c.D + e, nan);
    for (std::int64_t e = 0; e < c.Hkv * c.Dv; ++e) v_cache.set(r * c.Hkv * c.Dv + e, nan);
  }

  for (std::int64_t b = 0; b < B; ++b)
    seqlens.push_back(static_cast<std::int32_t>(c.cache_len[static_cast<std::size_t>(b)]));
  // Left padding: the padded keys of the cache hold NaN (never attended, never read as keys).
  for (const std::int64_t pad : c.leftpad) leftpad.push_back(static_cast<std::int32_t>(pad));
  for (std::size_t b = 0; b < leftpad.size(); ++b)
    for (std::int64_t j = 0; j < std::min<std::int64_t>(leftpad[b], c.cache_len[b]); ++j) {
      const std::int64_t r = cache_row(static_cast<std::int64_t>(b), j);
      for (std::int64_t e = 0; e < c.Hkv * c.D; ++e) k_cache.set(r * c.Hkv * c.D + e, nan);
      for (std::int64_t e = 0; e < c.Hkv * c.Dv; ++e) v_cache.set(r * c.Hkv * c.Dv + e, nan);
    }
  k_cache_before = k_cache;
  v_cache_before = v_cache;
  if (c.varlen) {
    cu_q = prefix_offsets(c.len_q);
    const std::int64_t total_q = cu_q.back();
    q = HostTensor::contiguous(dtype, {total_q, c.Hq, c.D});
    out = HostTensor::contiguous(out_dtype, {total_q, c.Hq, c.Dv});
    lse = HostTensor::contiguous(DType::f32, {c.Hq, total_q});
    if (!c.len_new_varlen.empty()) {
      cu_new = prefix_offsets(c.len_new_varlen);
      k_new = HostTensor::contiguous(dtype, {cu_new.back(), c.Hkv, c.D});
      v_new = HostTensor::contiguous(dtype, {cu_new.back(), c.Hkv, c.Dv});
    }
  } else {
    const std::int64_t Lq = c.len_q[0];
    q = HostTensor::operand(dtype, B, Lq, c.Hq, c.D, Layout::padded_bshd);
    out = HostTensor::operand(out_dtype, B, Lq, c.Hq, c.Dv, Layout::padded_bshd);
    lse = HostTensor::lse(B, c.Hq, Lq, Layout::bshd);
    if (c.len_new > 0) {
      k_new = HostTensor::operand(dtype, B, c.len_new, c.Hkv, c.D, Layout::padded_bshd);
      v_new = HostTensor::operand(dtype, B, c.len_new, c.Hkv, c.Dv, Layout::padded_bshd);
    }
  }
  q.fill_normal(rng);
  if (k_new.numel() > 0) {
    k_new.fill_normal(rng);
    v_new.fill_normal(rng);
  }
  if (c.rotary_dim > 0) {
    const std::int64_t positions = capacity + most_q + 2, half = c.rotary_dim / 2;
    cos = HostTensor::contiguous(DType::f32, {positions, half});
    sin = HostTensor::contiguous(DType::f32, {positions, half});
    for (std::int64_t p = 0; p < positions; ++p)
      for (std::int64_t i = 0; i < half; ++i) {
        const double angle =
            static_cast<double>(p) *
            std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(c.rotary_dim));
        cos.set(p * half + i, static_cast<float>(std::cos(angle)));
        sin.set(p * half + i, static_cast<float>(std::sin(angle)));
      }
  }
  if (c.alibi) {
    std::uniform_real_distribution<float> slope(0.01f, 0.5f);
    for (std::int64_t i = 0; i < B * c.Hq; ++i) slopes.push_back(slope(rng));
  }
}

std::int64_t KvProblem::new_count(std::int64_t b) const {
  if (c.varlen) return c.len_new_varlen.empty() ? 0 : c.len_new_varlen[static_cast<std::size_t>(b)];
  return c.len_new;
}

std::int64_t KvProblem::query_rows(std::int64_t b) const {
  return c.len_q[c.varlen ? static_cast<std::size_t>(b) : 0];
}

std::int64_t KvProblem::first_query_row(std::int64_t b) const {
  return c.varlen ? cu_q[static_cast<std::size_t>(b)] : 0;
}

std::int64_t KvProblem::first_new_row(std::int64_t b) const {
  return c.varlen && !cu_new.empty() ? cu_new[static_cast<std::size_t>(b)] : 0;
}

std::int64_t KvProblem::cache_row(std::int64_t b, std::int64_t j) const {
  if (c.block_size > 0) {
    const std::int64_t per_seq = capacity / c.block_size;
    return std::int64_t{block_table[static_cast<std::size_t>(b * per_seq + j / c.block_size)]} *
               c.block_size +
           j % c.block_size;
  }
  const std::int64_t entry = batch_idx.empty() ? b : batch_idx[static_cast<std::size_t>(b)];
  return entry * capacity + j;
}

KvCacheArgs KvProblem::args() {
  KvCacheArgs a;
  a.q = q.view();
  a.k_cache = k_cache.view();
  a.v_cache = v_cache.view();
  if (!block_table.empty())
    a.block_table = make_tensor(block_table.data(), DType::i32, {B, capacity / c.block_size});
  if (!batch_idx.empty()) a.cache_batch_idx = i32_view(batch_idx);
  a.cache_seqlens = i32_view(seqlens);
  if (!leftpad.empty()) a.cache_leftpad = i32_view(leftpad);
  if (k_new.numel() > 0) {
    a.k_new = k_new.view();
    a.v_new = v_new.view();
    if (!cu_new.empty()) a.cu_seqlens_k_new = i32_view(cu_new);
  }
  if (c.rotary_dim > 0) {
    a.rotary_cos = cos.view();
    a.rotary_sin = sin.view();
    a.rotary_interleaved = c.interleaved;
  }
  a.out = out.view();
  a.lse = lse.view();
  a.causal = c.causal;
  a.window_left = c.window_left;
  a.window_right = c.window_right;
  a.softcap = c.softcap;
  if (c.alibi) a.alibi_slopes = make_tensor(slopes.data(), DType::f32, {B, c.Hq});
  if (c.varlen) {
    a.cu_seqlens_q = i32_view(cu_q);
    a.max_seqlen_q = *std::max_element(c.len_q.begin(), c.len_q.end());
  }
  a.num_splits = c.num_splits;
  return a;
}

std::vector<float> KvProblem::expected_key(std::int64_t b, std::int64_t j, std::int64_t h) const {
  std::vector<float> x(static_cast<std::size_t>(c.D));
  const std::int64_t t = j - c.cache_len[static_cast<std::size_t>(b)];
  const std::int64_t row = c.varlen ? first_new_row(b) + t : b * c.len_new + t;
  for (std::int64_t d = 0; d < c.D; ++d)
    x[static_cast<std::size_t>(d)] = k_new.get((row * c.Hkv + h) * c.D + d);
  if (c.rotary_dim > 0) rope_f32(x.data(), c.rotary_dim, c.interleaved, cos, sin, j);
  for (float& e : x) e = round_to(dtype, e);
  return x;
}

void KvProblem::expected(std::vector<float>& out_ref, std::vector<float>& lse_ref) const {
  out_ref.assign(static_cast<std::size_t>(out.numel()), 0.0f);
  lse_ref.assign(static_cast<std::size_t>(lse.numel()), 0.0f);
  const bool per_row = c.causal || c.window_left >= 0 || c.window_right >= 0;
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t Lq = query_rows(b), len = c.cache_len[static_cast<std::size_t>(b)];
    const std::int64_t Lk = len + new_count(b);
    if (Lq == 0) continue;
    // One extra NaN key behind key_lengths: the oracle's own masked-means-absent.
    HostTensor k = HostTensor::contiguous(dtype, {1, Lk + 1, c.Hkv, c.D});
    HostTensor v = HostTensor::contiguous(dtype, {1, Lk + 1, c.Hkv, c.Dv});
    k.fill(std::numeric_limits<float>::quiet_NaN());
    v.fill(std::numeric_limits<float>::quiet_NaN());
    for (std::int64_t j = 0; j < Lk; ++j)
      for (std::int64_t h = 0; h < c.Hkv; ++h) {
        if (j < len) {
          const std::int64_t row = cache_row(b, j);
          for (std::int64_t d = 0; d < c.D; ++d)
            k.set((j * c.Hkv + h) * c.D + d, k_cache_before.get((row * c.Hkv + h) * c.D + d));
          for (std::int64_t d = 0; d < c.Dv; ++d)
            v.set((j * c.Hkv + h) * c.Dv + d, v_cache_before.get((row * c.Hkv + h) * c.Dv + d));
        } else {
          const std::vector<float> key = expected_key(b, j, h);
          for (std::int64_t d = 0; d < c.D; ++d)
            k.set((j * c.Hkv + h) * c.D + d, key[static_cast<std::size_t>(d)]);
          const std::int64_t t = j - len;
          const std::int64_t row = c.varlen ? first_new_row(b) + t : b * c.len_new + t;
          for (std::int64_t d = 0; d < c.Dv; ++d)
            v.set((j * c.Hkv + h) * c.Dv + d, v_new.get((row * c.Hkv + h) * c.Dv + d));
        }
      }
    HostTensor qb = HostTensor::contiguous(dtype, {1, Lq, c.Hq, c.D});
    std::vector<float> x(static_cast<std::size_t>(c.D));
    for (std::int64_t i = 0; i < Lq; ++i)
      for (std::int64_t h = 0; h < c.Hq; ++h) {
        const std::int64_t row = c.varlen ? first_query_row(b) + i : b * Lq + i;
        for (std::int64_t d = 0; d < c.D; ++d)
          x[static_cast<std::size_t>(d)] = q.get((row * c.Hq + h) * c.D + d);
        if (c.rotary_dim > 0)
          rope_f32(x.data(), c.rotary_dim, c.interleaved, cos, sin, len + (per_row ? i : 0));
        for (std::int64_t d = 0; d < c.D; ++d)
          qb.set((i * c.Hq + h) * c.D + d, round_to(dtype, x[static_cast<std::size_t>(d)]));
      }
    HostTensor ob = HostTensor::contiguous(DType::f32, {1, Lq, c.Hq, c.Dv});
    HostTensor lb = HostTensor::contiguous(DType::f32, {1, c.Hq, Lq});
    const std::vector<std::int32_t> key_len{static_cast<std::int32_t>(Lk)};
    AttentionArgs a;
    a.q = qb.view();
    a.k = k.view();
    a.v = v.view();
    a.out = ob.view();
    a.lse = lb.view();
    a.key_lengths = make_tensor(key_len.data(), DType::i32, {1});
    // Left padding as attention_forward's own boolean mask over the keys, at their positions.
    std::vector<std::uint8_t> attend(static_cast<std::size_t>(Lq * (Lk + 1)), 1);
    const std::int64_t pad = leftpad.empty() ? 0 : leftpad[static_cast<std::size_t>(b)];
    for (std::int64_t i = 0; i < Lq; ++i)
      for (std::int64_t j = 0; j < std::min(pad, Lk + 1); ++j)
        attend[static_cast<std::size_t>(i * (Lk + 1) + j)] = 0;
    if (pad > 0) a.mask = make_tensor(attend.data(), DType::boolean, {Lq, Lk + 1});
    a.causal = c.causal;
    a.window_left = c.window_left;
    a.window_right = c.window_right;
    a.softcap = c.softcap;
    if (c.alibi) a.alibi_slopes = make_tensor(slopes.data() + b * c.Hq, DType::f32, {c.Hq});
    Context ctx;
    ctx.backend = Backend::reference;
    attention_forward(a, ctx);
    for (std::int64_t i = 0; i < Lq; ++i)
      for (std::int64_t h = 0; h < c.Hq; ++h) {
        const std::int64_t row = c.varlen ? first_query_row(b) + i : b * Lq + i;
        for (std::int64_t d = 0; d < c.Dv; ++d)
          out_ref[static_cast<std::size_t>((row * c.Hq + h) * c.Dv + d)] =
              ob.get((i * c.Hq + h) * c.Dv + d);
        const std::int64_t li = c.varlen ? h * cu_q.back() + row : (b * c.Hq + h) * Lq + i;
        lse_ref[static_cast<std::size_t>(li)] = lb.get(h * Lq + i);
      }
  }
}

void expect_matches_oracle(const KvProblem& p, double tol_f32_out, double tol_16bit_out,
                           double lse_tol) {
  std::vector<float> out_ref, lse_ref;
  p.expected(out_ref, lse_ref);
  const ErrorStats e = compare(p.out.to_f32(), out_ref);
  EXPECT_EQ(e.nonfinite, 0) << e.str();
  const double tol = p.out.dtype() == DType::f32 ? tol_f32_out : tol_16bit_out;
  EXPECT_LE(e.rel_l2, tol) << e.str();
  const LseStats l = compare_lse(p.lse.to_f32(), lse_ref);
  EXPECT_EQ(l.mismatched_inf, 0) << l.str();
  EXPECT_LE(l.max_abs, lse_tol) << l.str();
  EXPECT_TRUE(p.out.padding_intact()) << "a write outside out's logical elements";
}

// The append wrote exactly each sequence's new rows (rotated keys, values as given) and left
// every other byte of both caches as it was.
void expect_append_exact(const KvProblem& p) {
  const std::int64_t Hkv = p.c.Hkv, D = p.c.D, Dv = p.c.Dv;
  std::vector<bool> written(static_cast<std::size_t>(p.k_cache.numel() / (Hkv * D)), false);
  for (std::int64_t b = 0; b < p.B; ++b) {
    const std::int64_t len = p.c.cache_len[static_cast<std::size_t>(b)];
    for (std::int64_t t = 0; t < p.new_count(b); ++t) {
      const std::int64_t row = p.cache_row(b, len + t);
      written[static_cast<std::size_t>(row)] = true;
      const std::int64_t src = p.c.varlen ? p.first_new_row(b) + t : b * p.c.len_new + t;
      for (std::int64_t h = 0; h < Hkv; ++h) {
        const std::vector<float> key = p.expected_key(b, len + t, h);
        for (std::int64_t d = 0; d < D; ++d)
          ASSERT_EQ(p.k_cache.get((row * Hkv + h) * D + d), key[static_cast<std::size_t>(d)])
              << "k_cache row " << row << " (sequence " << b << ", key " << len + t << ") head "
              << h << " dim " << d;
        for (std::int64_t d = 0; d < Dv; ++d)
          ASSERT_EQ(p.v_cache.get((row * Hkv + h) * Dv + d), p.v_new.get((src * Hkv + h) * Dv + d))
              << "v_cache row " << row << " head " << h << " dim " << d;
      }
    }
  }
  const std::size_t esize = size_of(p.dtype);
  for (std::size_t r = 0; r < written.size(); ++r) {
    if (written[r]) continue;
    const std::size_t kb = static_cast<std::size_t>(Hkv * D) * esize,
                      vb = static_cast<std::size_t>(Hkv * Dv) * esize;
    ASSERT_EQ(std::memcmp(p.k_cache.bytes().data() + r * kb,
                          p.k_cache_before.bytes().data() + r * kb, kb),
              0)
        << "k_cache row " << r << " changed but is not an appended row";
    ASSERT_EQ(std::memcmp(p.v_cache.bytes().data() + r * vb,
                          p.v_cache_before.bytes().data() + r * vb, vb),
              0)
        << "v_cache row " << r << " changed but is not an appended row";
  }
}

}  // namespace tileattn::test
