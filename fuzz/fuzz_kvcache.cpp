// libFuzzer target: tileattn::attention_with_kvcache (and apply_rotary) on tiny problems decoded
// from the input bytes, on the reference backend and on the CPU backend (one thread, a fuzzed
// ISA cap), each on its own copy of the caches.
//
// The decoder builds a valid problem (contiguous cache, optionally through cache_batch_idx, or
// a paged one with a shuffled block table and a shared read-only page; new keys; rotary tables;
// varlen queries; left padding; every attention option) and sometimes breaks one argument on
// purpose. Every cache row that no sequence holds, cache padding, rows under the left padding,
// the rows about to be appended and every rotary table row no position uses hold NaN: masked
// means absent, so they must never reach an output.
// Every buffer is allocated to exactly the span it addresses, so ASan reports any access outside.
// A violation ends in __builtin_trap() (docs/fuzzing.md lists the checks).
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "common/float_convert.hpp"
#include "tileattn/tileattn.hpp"

namespace {

using tileattn::DType;
using tileattn::Tensor;
using I32 = std::vector<std::int32_t>;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kLarge = 1e4f;  // beyond this a finite input is "large": no accuracy check

// Float storage of exactly n elements (one at least, so that the pointer is present).
struct Buf {
  DType dtype = DType::f32;
  std::vector<std::byte> bytes;
  void init(DType t, std::int64_t n, float fill) {
    dtype = t;
    bytes.assign(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) * tileattn::size_of(t),
                 std::byte{0});
    for (std::int64_t i = 0; i < size(); ++i) set(i, fill);
  }
  std::int64_t size() const { return static_cast<std::int64_t>(bytes.size() / esize()); }
  std::size_t esize() const { return tileattn::size_of(dtype); }
  float get(std::int64_t i) const { return tileattn::detail::load_as_f32(bytes.data(), dtype, i); }
  void set(std::int64_t i, float x) { tileattn::detail::store_from_f32(bytes.data(), dtype, i, x); }
  // A NaN bit pattern no computation produces (f32 0x7fe5a5a5; 0x7fa5, a signalling bf16 NaN).
  void poison() {
    const std::uint32_t s = esize() == 4 ? 0x7fe5a5a5u : 0x7fa5u;
    for (std::size_t i = 0; i < bytes.size(); i += esize()) std::memcpy(&bytes[i], &s, esize());
  }
  bool poisoned(std::int64_t i) const {
    const std::uint32_t s = esize() == 4 ? 0x7fe5a5a5u : 0x7fa5u;
    return std::memcmp(&bytes[static_cast<std::size_t>(i) * esize()], &s, esize()) == 0;
  }
  // Bitwise equal, or both NaN (payloads may differ).
  bool same(std::int64_t i, float x) const {
    if (std::isnan(x)) return std::isnan(get(i));
    Buf one;
    one.init(dtype, 1, x);
    return std::memcmp(&bytes[static_cast<std::size_t>(i) * esize()], one.bytes.data(), esize()) ==
           0;
  }
};

Tensor view(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
            std::initializer_list<std::int64_t> stride = {}) {
  Tensor t = tileattn::make_tensor(data, dtype, shape);
  if (stride.size() == shape.size()) std::copy(stride.begin(), stride.end(), t.stride);
  return t;
}

struct Rng {  // xorshift64: the values (the input bytes would run out long before)
  std::uint64_t s;
  std::uint64_t next() { return s ^= s << 13, s ^= s >> 7, s ^= s << 17; }
  float uniform(float r) { return r * (static_cast<float>(next() >> 40) / 8388608.0f - 1.0f); }
  std::int64_t below(std::int64_t n) { return static_cast<std::int64_t>(next() % n); }
};

struct Problem {
  DType dt = DType::f32, out_dt = DType::f32;
  bool varlen = false, paged = false, has_new = false, bidx = false, with_lse = false;
  bool causal = false, interleaved = false, alibi2 = false;
  std::int64_t B = 0, Hkv = 1, group = 1, Hq = 1, D = 1, Dv = 1, Lq = 0, Lnew = 0;
  std::int64_t bs = 1, rows_per_blk = 1, max_blocks = 1, num_blocks = 1, pad = 0;
  std::int64_t half = 0, positions = 0, total_q = 0, total_new = 0, max_seqlen_q = 0;
  std::int64_t wl = -1, wr = -1, need = -1;  // need: the largest rotary position used
  int splits = 0, expect = 0;  // expect: 0 valid, 1 invalid (an argument broken on purpose)
  float softcap = 0, scale = 0;
  bool has_scale = false, has_alibi = false, rotary_call = false, rotary_in_place = false;
  tileattn::CpuIsa isa = tileattn::CpuIsa::best;
  std::vector<std::int64_t> len, rows, news;  // per sequence, as built (valid)
  I32 seqlens, cu_q, cu_new, table, entries;  // as passed
  I32 leftpad;                                // empty: none
  Buf q, k0, v0, kn, vn, cos, sin, slopes;    // k0, v0: the caches before the call
  Buf k[2], v[2], out[2], lse[2], rot[2];     // per backend: 0 reference, 1 cpu

  std::int64_t capacity() const { return paged ? max_blocks * bs : rows_per_blk; }
  std::int64_t q_row(std::int64_t b, std::int64_t i) const {
    return varlen ? cu_q[b] + i : b * Lq + i;
  }
  std::int64_t new_row(std::int64_t b, std::int64_t t) const {
    return varlen ? cu_new[b] + t : b * Lnew + t;
  }
  // Element offset of key j of sequence b, kv head h, in a cache with head dim `dim` (-1: none).
  std::int64_t at(std::int64_t b, std::int64_t j, std::int64_t h, std::int64_t dim) const {
    const std::int64_t blk = paged ? table[b * max_blocks + j / bs] : bidx ? entries[b] : b;
    if (blk < 0 || blk >= num_blocks) return -1;
    const std::int64_t hs = dim + pad, rs = Hkv * hs;
    return blk * rows_per_blk * rs + (paged ? j % bs : j) * rs + h * hs;
  }
  std::int64_t span(std::int64_t dim) const {
    return (num_blocks * rows_per_blk - 1) * Hkv * (dim + pad) + (Hkv - 1) * (dim + pad) + dim;
  }
  bool per_row() const { return causal || wl >= 0 || wr >= 0; }
};

const Problem* current = nullptr;

void describe(const Problem& p) {
  std::fprintf(
      stderr,
      "  dtype %s out %s B %lld Hkv %lld Hq %lld D %lld Dv %lld varlen %d paged %d bs %lld "
      "rows/blk %lld max_blocks %lld num_blocks %lld pad %lld batch_idx %d new %d lse %d\n"
      "  causal %d window (%lld, %lld) softcap %g scale %g (given %d) alibi %d splits %d "
      "isa %s rotary dim %lld positions %lld interleaved %d expect %d\n  seq:",
      tileattn::to_string(p.dt), tileattn::to_string(p.out_dt), (long long)p.B, (long long)p.Hkv,
      (long long)p.Hq, (long long)p.D, (long long)p.Dv, p.varlen, p.paged, (long long)p.bs,
      (long long)p.rows_per_blk, (long long)p.max_blocks, (long long)p.num_blocks, (long long)p.pad,
      p.bidx, p.has_new, p.with_lse, p.causal, (long long)p.wl, (long long)p.wr, (double)p.softcap,
      (double)p.scale, p.has_scale, p.has_alibi, p.splits, tileattn::to_string(p.isa),
      (long long)(2 * p.half), (long long)p.positions, p.interleaved, p.expect);
  for (std::int64_t b = 0; b < p.B; ++b)
    std::fprintf(stderr, " [len %lld (passed %d) new %lld rows %lld]", (long long)p.len[b],
                 p.seqlens[b], (long long)p.news[b], (long long)p.rows[b]);
  std::fprintf(stderr, "\n");
}

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_kvcache finding: %s\n", what);
  if (current) describe(*current);
  __builtin_trap();
}

// The documented RoPE: each product and sum rounded to f32 on its own (separate statements, so
// no contraction into a fused multiply-add).
void rope(const Problem& p, float* x, std::int64_t pos) {
  for (std::int64_t i = 0; i < p.half; ++i) {
    const float c = p.cos.get(pos * p.half + i), s = p.sin.get(pos * p.half + i);
    const std::int64_t ia = p.interleaved ? 2 * i : i, ib = p.interleaved ? 2 * i + 1 : i + p.half;
    const float ac = x[ia] * c, bs = x[ib] * s, as = x[ia] * s, bc = x[ib] * c;
    x[ia] = ac - bs;
    x[ib] = as + bc;
  }
}

void decode(FuzzedDataProvider& in, Problem& p) {
  const auto pick = [&](int lo, int hi) { return in.ConsumeIntegralInRange<int>(lo, hi); };
  // Rare choices at the top of a range: an exhausted input (0s) decodes to the common case.
  const auto one_in = [&](int n) { return pick(0, n - 1) == n - 1; };
  const DType types[] = {DType::f32, DType::f16, DType::bf16};
  p.dt = types[pick(0, 2)];
  p.out_dt = in.ConsumeBool() ? p.dt : types[pick(0, 2)];
  p.varlen = one_in(3);
  p.B = one_in(16) ? 0 : pick(1, 3);
  p.Hkv = pick(1, 3), p.group = pick(1, 4), p.Hq = p.Hkv * p.group;
  p.D = pick(1, 40), p.Dv = in.ConsumeBool() ? p.D : pick(1, 40);
  p.paged = in.ConsumeBool();
  p.has_new = in.ConsumeBool();
  p.with_lse = in.ConsumeBool();
  p.Lq = pick(0, 4), p.Lnew = p.has_new ? pick(0, 3) : 0;
  p.pad = one_in(4) ? pick(1, 3) : 0;
  for (std::int64_t b = 0; b < p.B; ++b) {
    p.len.push_back(pick(0, 12));
    p.rows.push_back(p.varlen ? pick(0, 4) : p.Lq);
    p.news.push_back(p.has_new ? (p.varlen ? pick(0, 3) : p.Lnew) : 0);
  }
  Rng rng{in.ConsumeIntegral<std::uint64_t>() | 1};
  std::int64_t most = 0;
  for (std::int64_t b = 0; b < p.B; ++b) most = std::max(most, p.len[b] + p.news[b]);
  if (p.paged) {
    p.bs = p.rows_per_blk = pick(1, 8);
    p.max_blocks = std::max<std::int64_t>((most + p.bs - 1) / p.bs + pick(0, 1), 1);
    std::int64_t used = 0;
    for (std::int64_t b = 0; b < p.B; ++b) used += (p.len[b] + p.news[b] + p.bs - 1) / p.bs;
    p.num_blocks = std::max<std::int64_t>(used + pick(0, 2), 1);
    I32 perm(static_cast<std::size_t>(p.num_blocks));
    std::iota(perm.begin(), perm.end(), 0);
    for (std::size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[rng.below(i)]);
    const int beyond = pick(0, 2);  // table entries past a sequence's pages: -1, garbage, a page
    p.table.assign(static_cast<std::size_t>(p.B * p.max_blocks), -1);
    std::size_t next = 0;
    for (std::int64_t b = 0; b < p.B; ++b)
      for (std::int64_t k = 0; k < p.max_blocks; ++k)
        p.table[b * p.max_blocks + k] = k * p.bs < p.len[b] + p.news[b] ? perm[next++]
                                        : beyond == 0                   ? -1
                                        : beyond == 1
                                            ? static_cast<std::int32_t>(rng.next())
                                            : static_cast<std::int32_t>(rng.below(p.num_blocks));
    if (p.B >= 2 && p.len[0] >= p.bs && p.len[1] >= p.bs && in.ConsumeBool())
      p.table[p.max_blocks] = p.table[0];  // a full page shared read-only (prefix sharing)
  } else {
    p.rows_per_blk = std::max<std::int64_t>(most + pick(0, 3), 1);
    p.bidx = in.ConsumeBool();
    p.num_blocks = p.B + pick(0, p.bidx ? 2 : 1);
    if (p.bidx) {
      I32 perm(static_cast<std::size_t>(p.num_blocks));
      std::iota(perm.begin(), perm.end(), 0);
      for (std::size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[rng.below(i)]);
      p.entries.assign(perm.begin(), perm.begin() + p.B);
    }
  }
  p.cu_q.assign(1, 0), p.cu_new.assign(1, 0);
  for (std::int64_t b = 0; b < p.B; ++b) {
    p.cu_q.push_back(static_cast<std::int32_t>(p.cu_q.back() + p.rows[b]));
    p.cu_new.push_back(static_cast<std::int32_t>(p.cu_new.back() + p.news[b]));
    p.max_seqlen_q = std::max(p.max_seqlen_q, p.rows[b]);
    p.seqlens.push_back(static_cast<std::int32_t>(p.len[b]));
  }
  p.total_q = p.cu_q.back(), p.total_new = p.cu_new.back();
  p.causal = in.ConsumeBool();
  p.wl = one_in(3) ? pick(0, 6) : -1, p.wr = one_in(4) ? pick(0, 6) : -1;
  p.softcap = one_in(4) ? (pick(0, 2) == 0 ? 0.5f : 5.0f) : 0.0f;
  static const float scales[] = {0.0f, -0.5f, 2.0f, 1e-3f};
  static const int split_counts[] = {1, 2, 3, 5, 32};
  if ((p.has_scale = one_in(6))) p.scale = scales[pick(0, 3)];
  p.has_alibi = one_in(4), p.alibi2 = in.ConsumeBool();
  p.splits = one_in(2) ? 0 : split_counts[pick(0, 4)];
  p.isa = static_cast<tileattn::CpuIsa>(pick(0, 4));
  // Rotary: the table covers the positions used (+ 0..2); unused rows are NaN.
  if (p.D >= 2 && one_in(3)) {
    p.half = pick(1, static_cast<int>(p.D / 2)), p.interleaved = in.ConsumeBool();
    std::int64_t& need = p.need;
    for (std::int64_t b = 0; b < p.B; ++b) {
      if (p.news[b] > 0) need = std::max(need, p.len[b] + p.news[b] - 1);
      if (p.rows[b] > 0) need = std::max(need, p.len[b] + (p.per_row() ? p.rows[b] - 1 : 0));
    }
    p.positions = need + 1 + pick(0, 2);
    p.rotary_call = in.ConsumeBool(), p.rotary_in_place = in.ConsumeBool();
  }

  // Sometimes one argument broken on purpose.
  const int b = p.B > 0 ? pick(0, static_cast<int>(p.B - 1)) : 0;
  p.expect = p.B == 0 ? 1 : 0;
  switch (p.B > 0 && one_in(4) ? pick(0, 7) : -1) {
    case 0: p.seqlens[b] = -pick(1, 3), p.expect = 1; break;
    case 1:
      p.seqlens[b] = static_cast<std::int32_t>(p.capacity() - p.news[b] + pick(1, 2)), p.expect = 1;
      break;
    case 2: {
      const std::int32_t bad[] = {-1, static_cast<std::int32_t>(p.num_blocks), 1 << 30,
                                  std::numeric_limits<std::int32_t>::min()};
      if (p.paged && p.len[b] + p.news[b] > 0) {
        p.table[b * p.max_blocks + pick(0, static_cast<int>((p.len[b] + p.news[b] - 1) / p.bs))] =
            bad[pick(0, 3)];
        p.expect = 1;
      } else if (p.bidx) {
        p.entries[b] = bad[pick(0, 3)], p.expect = 1;
      } else if (!p.paged && p.B >= 2) {
        p.num_blocks = p.B - 1, p.expect = 1;
      }
      break;
    }
    case 3:  // a cache entry named twice: refused only when appending
      if (p.bidx && p.B >= 2) p.entries[1] = p.entries[0], p.expect = p.has_new ? 1 : 0;
      break;
    case 4:  // a table that may be too short
      if (p.half > 0) {
        p.positions = pick(0, static_cast<int>(std::max<std::int64_t>(p.need, 0)));
        p.expect = p.positions <= p.need ? 1 : 0;
      }
      break;
    case 5: p.splits = pick(0, 1) ? -1 : 257, p.expect = 1; break;
    case 6: (pick(0, 1) ? p.softcap = -1.0f : p.wl = -2), p.expect = 1; break;
    case 7:
      if (p.varlen && p.max_seqlen_q > 0) p.max_seqlen_q -= 1, p.expect = 1;
      break;
    default: break;
  }
}

// The values: q, the rows each sequence holds, the new rows (plus up to three special values),
// the rotary rows some position uses, ALiBi slopes; everything else NaN. Outputs poisoned.
void build(FuzzedDataProvider& in, Problem& p) {
  Rng rng{in.ConsumeIntegral<std::uint64_t>() | 1};
  static const float ranges[] = {0.01f, 0.5f, 1.0f, 2.0f, 4.0f, 8.0f};
  const float range = ranges[in.ConsumeIntegralInRange<int>(0, 5)];
  const std::int64_t q_rows = p.varlen ? p.total_q : p.B * p.Lq;
  const std::int64_t new_rows = p.varlen ? p.total_new : p.B * p.Lnew;
  const auto random = [&](Buf& b, DType t, std::int64_t n) {
    b.init(t, n, 0.0f);
    for (std::int64_t i = 0; i < n; ++i) b.set(i, rng.uniform(range));
  };
  random(p.q, p.dt, q_rows * p.Hq * p.D);
  random(p.kn, p.dt, new_rows * p.Hkv * p.D);
  random(p.vn, p.dt, new_rows * p.Hkv * p.Dv);
  p.k0.init(p.dt, p.span(p.D), kNaN);
  p.v0.init(p.dt, p.span(p.Dv), kNaN);
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t j = 0; j < p.len[b]; ++j)
      for (std::int64_t h = 0; h < p.Hkv; ++h) {
        const std::int64_t ko = p.at(b, j, h, p.D), vo = p.at(b, j, h, p.Dv);
        for (std::int64_t d = 0; ko >= 0 && d < p.D; ++d) p.k0.set(ko + d, rng.uniform(range));
        for (std::int64_t d = 0; vo >= 0 && d < p.Dv; ++d) p.v0.set(vo + d, rng.uniform(range));
      }
  static const float specials[] = {kNaN, kInf, -kInf, 3e38f, 1e-40f, -0.0f, 65504.0f, 1e5f};
  Buf* targets[] = {&p.q, &p.k0, &p.v0, &p.kn, &p.vn};
  for (int n = in.ConsumeIntegralInRange<int>(0, 3) == 3 ? in.ConsumeIntegralInRange<int>(1, 3) : 0;
       n > 0; --n) {
    Buf& t = *targets[in.ConsumeIntegralInRange<int>(0, 4)];
    t.set(in.ConsumeIntegralInRange<std::int64_t>(0, t.size() - 1),
          specials[in.ConsumeIntegralInRange<int>(0, 7)]);
  }
  if (p.half > 0) {
    const DType table_type = in.ConsumeBool() ? DType::f32 : p.dt;
    const bool angles = in.ConsumeBool();
    p.cos.init(table_type, p.positions * p.half, kNaN);
    p.sin.init(table_type, p.positions * p.half, kNaN);
    std::vector<bool> used(static_cast<std::size_t>(p.positions), false);
    const auto use = [&](std::int64_t pos) {
      if (pos < p.positions) used[static_cast<std::size_t>(pos)] = true;
    };
    for (std::int64_t b = 0; b < p.B; ++b) {
      for (std::int64_t t = 0; t < p.news[b]; ++t) use(p.len[b] + t);
      for (std::int64_t i = 0; i < p.rows[b] && (i == 0 || p.per_row()); ++i) use(p.len[b] + i);
    }
    for (std::int64_t pos = 0; pos < p.positions; ++pos)
      for (std::int64_t i = 0; used[static_cast<std::size_t>(pos)] && i < p.half; ++i) {
        const double angle =
            static_cast<double>(pos) *
            std::pow(10000.0, -static_cast<double>(i) / static_cast<double>(p.half));
        p.cos.set(pos * p.half + i,
                  angles ? static_cast<float>(std::cos(angle)) : rng.uniform(1.5f));
        p.sin.set(pos * p.half + i,
                  angles ? static_cast<float>(std::sin(angle)) : rng.uniform(1.5f));
      }
  }
  if (p.has_alibi) random(p.slopes, DType::f32, p.alibi2 ? p.B * p.Hq : p.Hq);
  for (int x = 0; x < 2; ++x) {
    p.k[x] = p.k0, p.v[x] = p.v0;
    p.out[x].init(p.out_dt, q_rows * p.Hq * p.Dv, 0.0f);
    p.lse[x].init(DType::f32, q_rows * p.Hq, 0.0f);
    p.out[x].poison(), p.lse[x].poison();
  }
  // Index vectors keep one element at least: an empty view still needs its pointer.
  for (I32* v : {&p.seqlens, &p.table, &p.entries}) v->resize(std::max<std::size_t>(v->size(), 1));

  // Left padding, decoded last (older corpus entries, which end before it, keep their meaning):
  // each sequence's first keys not attended, the cache rows among them NaN; sometimes one
  // entry out of range on purpose.
  if (p.B > 0 && p.expect == 0 && in.ConsumeIntegralInRange<int>(0, 3) == 3) {
    for (std::int64_t b = 0; b < p.B; ++b) {
      const std::int64_t keys = p.len[b] + p.news[b];
      const std::int64_t pad = in.ConsumeIntegralInRange<std::int64_t>(0, keys);
      p.leftpad.push_back(static_cast<std::int32_t>(pad));
      for (std::int64_t j = 0; j < std::min(pad, p.len[b]); ++j)
        for (std::int64_t h = 0; h < p.Hkv; ++h) {
          const std::int64_t ko = p.at(b, j, h, p.D), vo = p.at(b, j, h, p.Dv);
          for (Buf* k : {&p.k0, &p.k[0], &p.k[1]})
            for (std::int64_t d = 0; ko >= 0 && d < p.D; ++d) k->set(ko + d, kNaN);
          for (Buf* v : {&p.v0, &p.v[0], &p.v[1]})
            for (std::int64_t d = 0; vo >= 0 && d < p.Dv; ++d) v->set(vo + d, kNaN);
        }
    }
    if (in.ConsumeIntegralInRange<int>(0, 7) == 7) {
      const std::int64_t b = in.ConsumeIntegralInRange<std::int64_t>(0, p.B - 1);
      p.leftpad[static_cast<std::size_t>(b)] =
          in.ConsumeBool() ? -1 : static_cast<std::int32_t>(p.len[b] + p.news[b] + 1);
      p.expect = 1;
    }
  }
}

tileattn::KvCacheArgs args(Problem& p, int x) {
  tileattn::KvCacheArgs a;
  const DType dt = p.dt, i32 = DType::i32;
  const std::int64_t B = p.B, Hq = p.Hq, Hkv = p.Hkv, rb = p.rows_per_blk;
  a.q = p.varlen ? view(p.q.bytes.data(), dt, {p.total_q, Hq, p.D})
                 : view(p.q.bytes.data(), dt, {B, p.Lq, Hq, p.D});
  const std::int64_t hk = p.D + p.pad, hv = p.Dv + p.pad;
  a.k_cache =
      view(p.k[x].bytes.data(), dt, {p.num_blocks, rb, Hkv, p.D}, {rb * Hkv * hk, Hkv * hk, hk, 1});
  a.v_cache = view(p.v[x].bytes.data(), dt, {p.num_blocks, rb, Hkv, p.Dv},
                   {rb * Hkv * hv, Hkv * hv, hv, 1});
  if (p.paged) a.block_table = view(p.table.data(), i32, {B, p.max_blocks});
  if (p.bidx) a.cache_batch_idx = view(p.entries.data(), i32, {B});
  a.cache_seqlens = view(p.seqlens.data(), i32, {B});
  if (!p.leftpad.empty()) a.cache_leftpad = view(p.leftpad.data(), i32, {B});
  if (p.has_new && p.varlen) {
    a.k_new = view(p.kn.bytes.data(), dt, {p.total_new, Hkv, p.D});
    a.v_new = view(p.vn.bytes.data(), dt, {p.total_new, Hkv, p.Dv});
    a.cu_seqlens_k_new = view(p.cu_new.data(), i32, {B + 1});
  } else if (p.has_new) {
    a.k_new = view(p.kn.bytes.data(), dt, {B, p.Lnew, Hkv, p.D});
    a.v_new = view(p.vn.bytes.data(), dt, {B, p.Lnew, Hkv, p.Dv});
  }
  if (p.half > 0) {
    a.rotary_cos = view(p.cos.bytes.data(), p.cos.dtype, {p.positions, p.half});
    a.rotary_sin = view(p.sin.bytes.data(), p.sin.dtype, {p.positions, p.half});
    a.rotary_interleaved = p.interleaved;
  }
  a.out = p.varlen ? view(p.out[x].bytes.data(), p.out_dt, {p.total_q, Hq, p.Dv})
                   : view(p.out[x].bytes.data(), p.out_dt, {B, p.Lq, Hq, p.Dv});
  if (p.with_lse)
    a.lse = p.varlen ? view(p.lse[x].bytes.data(), DType::f32, {Hq, p.total_q})
                     : view(p.lse[x].bytes.data(), DType::f32, {B, Hq, p.Lq});
  if (p.has_scale) a.scale = p.scale;
  a.causal = p.causal, a.window_left = p.wl, a.window_right = p.wr, a.softcap = p.softcap;
  if (p.has_alibi)
    a.alibi_slopes = p.alibi2 ? view(p.slopes.bytes.data(), DType::f32, {B, Hq})
                              : view(p.slopes.bytes.data(), DType::f32, {Hq});
  if (p.varlen) {
    a.cu_seqlens_q = view(p.cu_q.data(), i32, {B + 1});
    a.max_seqlen_q = p.max_seqlen_q;
  }
  a.num_splits = p.splits;
  return a;
}

bool run(Problem& p, int x) {
  const tileattn::Backend backend = x == 0 ? tileattn::Backend::reference : tileattn::Backend::cpu;
  try {
    tileattn::attention_with_kvcache(args(p, x),
                                     {.backend = backend, .threads = 1, .cpu_isa = p.isa});
  } catch (const tileattn::Error&) {
    return false;
  }
  return true;
}

// Both caches identical across backends; the appended rows hold the new keys rotated by the
// documented RoPE and the new values; every other element (padding included) as before.
void check_append(const Problem& p) {
  if (p.k[0].bytes != p.k[1].bytes || p.v[0].bytes != p.v[1].bytes)
    finding("the backends' caches differ after the append");
  std::vector<bool> k_new_elem(static_cast<std::size_t>(p.k0.size())),
      v_new_elem(static_cast<std::size_t>(p.v0.size()));
  std::vector<float> x(static_cast<std::size_t>(p.D));
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t t = 0; t < p.news[b]; ++t)
      for (std::int64_t h = 0; h < p.Hkv; ++h) {
        const std::int64_t j = p.len[b] + t, row = p.new_row(b, t);
        const std::int64_t ko = p.at(b, j, h, p.D), vo = p.at(b, j, h, p.Dv);
        for (std::int64_t d = 0; d < p.D; ++d) x[d] = p.kn.get((row * p.Hkv + h) * p.D + d);
        if (p.half > 0) rope(p, x.data(), j);
        for (std::int64_t d = 0; d < p.D; ++d) {
          k_new_elem[ko + d] = true;
          if (!p.k[0].same(ko + d, x[d])) finding("an appended key differs from the rotated k_new");
        }
        for (std::int64_t d = 0; d < p.Dv; ++d) {
          v_new_elem[vo + d] = true;
          if (!p.v[0].same(vo + d, p.vn.get((row * p.Hkv + h) * p.Dv + d)))
            finding("an appended value differs from v_new");
        }
      }
  const std::size_t es = p.k0.esize();
  for (std::size_t i = 0; i < k_new_elem.size(); ++i)
    if (!k_new_elem[i] && std::memcmp(&p.k[0].bytes[i * es], &p.k0.bytes[i * es], es) != 0)
      finding("k_cache changed outside the appended rows");
  for (std::size_t i = 0; i < v_new_elem.size(); ++i)
    if (!v_new_elem[i] && std::memcmp(&p.v[0].bytes[i * es], &p.v0.bytes[i * es], es) != 0)
      finding("v_cache changed outside the appended rows");
}

// One ulp of a 16-bit output at magnitude m (the two backends may round to neighbours).
double ulp16(DType t, double m) {
  return t == DType::bf16 ? m * 0x1p-7 + 1e-38 : t == DType::f16 ? m * 0x1p-10 + 0x1p-24 : 0.0;
}

double max_slope(const Problem& p) {
  double m = 0;
  for (std::int64_t i = 0; i < p.slopes.size(); ++i)
    m = std::max(m, std::fabs(static_cast<double>(p.slopes.get(i))));
  return m;
}

// Row by row (its keys: the window's, above the left padding): a row that sees no key is 0 with
// lse -inf; a row that sees a non-finite input is NaN throughout; a row whose visible inputs are
// finite and moderate is finite on both backends and the CPU agrees with the reference within
// a bound from the score magnitudes.
void check_rows(const Problem& p) {
  const std::int64_t wr = p.causal ? (p.wr < 0 ? 0 : std::min<std::int64_t>(p.wr, 0)) : p.wr;
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t i = 0; i < p.rows[b]; ++i)
      for (std::int64_t hq = 0; hq < p.Hq; ++hq) {
        const std::int64_t h = hq / p.group, Lk = p.len[b] + p.news[b], pos = Lk - p.rows[b] + i;
        const std::int64_t pad = p.leftpad.empty() ? 0 : p.leftpad[static_cast<std::size_t>(b)];
        const std::int64_t lo = std::max(pad, p.wl < 0 ? 0 : pos - p.wl);
        const std::int64_t hi = wr < 0 ? Lk - 1 : std::min(Lk - 1, pos + wr);
        bool bad = false, large = false, inf_qk = false;
        double qmax = 0, kmax = 0, vmax = 0;
        const auto look = [&](float x, double& m, bool qk) {
          if (qk && std::isinf(x))
            inf_qk = true;
          else if (!std::isfinite(x))
            bad = true;
          else if (std::fabs(x) > kLarge)
            large = true;
          else
            m = std::max(m, static_cast<double>(std::fabs(x)));
        };
        const std::int64_t r = p.q_row(b, i);
        for (std::int64_t d = 0; d < p.D; ++d) look(p.q.get((r * p.Hq + hq) * p.D + d), qmax, true);
        for (std::int64_t j = lo; j <= hi; ++j) {
          for (std::int64_t d = 0; d < p.D; ++d)
            look(p.k[0].get(p.at(b, j, h, p.D) + d), kmax, true);
          for (std::int64_t d = 0; d < p.Dv; ++d)
            look(p.v[0].get(p.at(b, j, h, p.Dv) + d), vmax, false);
        }
        // An infinite q or K element poisons the row like any non-finite input (the score it
        // makes may be -inf, which must not read as a masked key).
        if (inf_qk) bad = true;
        const std::int64_t oo = (r * p.Hq + hq) * p.Dv;
        const std::int64_t li = p.varlen ? hq * p.total_q + r : (b * p.Hq + hq) * p.Lq + i;
        for (int x = 0; x < 2; ++x) {
          const auto fail = [&](const char* what, std::int64_t d) {
            std::fprintf(stderr, "%s: sequence %lld row %lld head %lld dim %lld: out %g lse %g\n",
                         x == 0 ? "reference" : "cpu", (long long)b, (long long)i, (long long)hq,
                         (long long)d, (double)p.out[x].get(oo + d),
                         (double)(p.with_lse ? p.lse[x].get(li) : 0.0f));
            finding(what);
          };
          for (std::int64_t d = 0; d < p.Dv; ++d) {
            const float o = p.out[x].get(oo + d);
            if (lo > hi && o != 0.0f) fail("a row that sees no key is not 0", d);
            if (lo <= hi && bad && !std::isnan(o))
              fail("a row that sees a non-finite input is not NaN", d);
            if (lo <= hi && !bad && !large && !std::isfinite(o))
              fail("non-finite output from finite visible inputs", d);
          }
          const float l = p.with_lse ? p.lse[x].get(li) : 0.0f;
          if (p.with_lse && lo > hi && l != -kInf) fail("a row that sees no key: lse not -inf", 0);
          if (p.with_lse && lo <= hi && bad && !std::isnan(l))
            fail("a poisoned row's lse is not NaN", 0);
          if (p.with_lse && lo <= hi && !bad && !large && !std::isfinite(l))
            fail("non-finite lse from finite visible inputs", 0);
        }
        if (lo > hi || bad || large) continue;
        // Bound on |score| (the rotation scales q by at most 3 with tables in [-1.5, 1.5]).
        const double scale =
            std::fabs(p.has_scale ? p.scale : 1.0 / std::sqrt(static_cast<double>(p.D)));
        double S = scale * static_cast<double>(p.D) * qmax * (p.half > 0 ? 3.0 : 1.0) * kmax;
        if (p.softcap > 0) S = std::min<double>(S, p.softcap);
        if (p.has_alibi) S += static_cast<double>(Lk + p.rows[b]) * max_slope(p);
        const double ds = static_cast<double>(p.D + 8) * 0x1p-24 * (S + 1) + 0x1p-22 * (S + 8);
        const double rel = 2e-6 + static_cast<double>(Lk + 8) * 0x1p-23 + 4 * ds;
        for (std::int64_t d = 0; d < p.Dv; ++d) {
          const double rv = p.out[0].get(oo + d), cv = p.out[1].get(oo + d);
          if (std::fabs(rv - cv) >
              vmax * rel + ulp16(p.out_dt, std::max(std::fabs(rv), std::fabs(cv)))) {
            std::fprintf(stderr,
                         "out sequence %lld row %lld head %lld dim %lld: reference %.9g cpu %.9g "
                         "(max |v| %g, S %g)\n",
                         (long long)b, (long long)i, (long long)hq, (long long)d, rv, cv, vmax, S);
            finding("the cpu output disagrees with the reference");
          }
        }
        if (p.with_lse) {
          const double rl = p.lse[0].get(li), cl = p.lse[1].get(li);
          if (std::fabs(rl - cl) > 1e-6 * (1 + std::fabs(rl)) + rel) {
            std::fprintf(stderr,
                         "lse sequence %lld row %lld head %lld: reference %.9g cpu %.9g (S %g)\n",
                         (long long)b, (long long)i, (long long)hq, rl, cl, S);
            finding("the cpu lse disagrees with the reference");
          }
        }
      }
}

bool all_poisoned(const Buf& b) {
  for (std::int64_t i = 0; i < b.size(); ++i)
    if (!b.poisoned(i)) return false;
  return true;
}

// apply_rotary on q (out of place or in place), positions cache_seqlens[b] + l: both backends
// give the same verdict, a refusal writes nothing, a result is bitwise the documented RoPE.
void check_rotary(Problem& p) {
  bool valid = !p.varlen || p.B >= 1, ok[2];
  for (std::int64_t b = 0; b < p.B; ++b)
    valid = valid && p.seqlens[b] >= 0 &&
            (p.rows[b] == 0 || p.seqlens[b] + p.rows[b] - 1 < p.positions);
  for (int x = 0; x < 2; ++x) {
    p.rot[x] = p.q;
    if (!p.rotary_in_place) p.rot[x].poison();
    const std::int64_t rows = p.varlen ? p.total_q : p.Lq;
    tileattn::RotaryArgs a;
    a.out = p.varlen ? view(p.rot[x].bytes.data(), p.dt, {rows, p.Hq, p.D})
                     : view(p.rot[x].bytes.data(), p.dt, {p.B, rows, p.Hq, p.D});
    a.x = a.out;
    if (!p.rotary_in_place) a.x.data = p.q.bytes.data();
    a.cos = view(p.cos.bytes.data(), p.cos.dtype, {p.positions, p.half});
    a.sin = view(p.sin.bytes.data(), p.sin.dtype, {p.positions, p.half});
    a.interleaved = p.interleaved;
    a.seqlen_offsets = view(p.seqlens.data(), DType::i32, {p.B});
    if (p.varlen) a.cu_seqlens = view(p.cu_q.data(), DType::i32, {p.B + 1});
    try {
      tileattn::apply_rotary(
          a, {.backend = x == 0 ? tileattn::Backend::reference : tileattn::Backend::cpu,
              .threads = 1,
              .cpu_isa = p.isa});
      ok[x] = true;
    } catch (const tileattn::Error&) {
      ok[x] = false;
    }
  }
  if (ok[0] != ok[1]) finding("apply_rotary: the backends disagree on validity");
  if (ok[0] != valid)
    finding(valid ? "apply_rotary refused valid positions"
                  : "apply_rotary accepted positions beyond the table");
  std::vector<float> row(static_cast<std::size_t>(p.D));
  for (int x = 0; x < 2; ++x) {
    if (!ok[x]) {
      if (p.rotary_in_place ? p.rot[x].bytes != p.q.bytes : !all_poisoned(p.rot[x]))
        finding("a refused apply_rotary wrote its output");
      continue;
    }
    for (std::int64_t b = 0; b < p.B; ++b)
      for (std::int64_t l = 0; l < p.rows[b]; ++l)
        for (std::int64_t h = 0; h < p.Hq; ++h) {
          const std::int64_t o = (p.q_row(b, l) * p.Hq + h) * p.D;
          for (std::int64_t d = 0; d < p.D; ++d) row[d] = p.q.get(o + d);
          rope(p, row.data(), p.seqlens[b] + l);
          for (std::int64_t d = 0; d < p.D; ++d)
            if (!p.rot[x].same(o + d, row[d]))
              finding("apply_rotary differs from the documented RoPE");
        }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  Problem p;
  decode(in, p);
  build(in, p);
  current = &p;
  // FUZZ_KVCACHE_VERBOSE=1: print every decoded problem (to read a saved input).
  static const bool verbose = std::getenv("FUZZ_KVCACHE_VERBOSE") != nullptr;
  if (verbose) describe(p);
  const bool ok = run(p, 0);
  if (run(p, 1) != ok) finding("the backends disagree on validity");
  if (ok && p.expect == 1) finding("accepted an argument broken on purpose");
  if (!ok && p.expect == 0) finding("refused a valid problem");
  for (int x = 0; x < 2; ++x) {
    if (!ok && (p.k[x].bytes != p.k0.bytes || p.v[x].bytes != p.v0.bytes))
      finding("a refused call changed the cache");
    if (!ok && (!all_poisoned(p.out[x]) || !all_poisoned(p.lse[x])))
      finding("a refused call wrote its outputs");
    for (std::int64_t i = 0; ok && i < p.out[x].size() && (p.varlen ? p.total_q : p.B * p.Lq) > 0;
         ++i)
      if (p.out[x].poisoned(i)) finding("an element of out was not written");
    for (std::int64_t i = 0;
         ok && p.with_lse && i < p.lse[x].size() && (p.varlen ? p.total_q : p.B * p.Lq) > 0; ++i)
      if (p.lse[x].poisoned(i)) finding("an element of lse was not written");
  }
  if (ok) {
    check_append(p);
    check_rows(p);
  }
  if (p.rotary_call && p.half > 0) check_rotary(p);
  return 0;
}
