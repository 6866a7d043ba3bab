// libFuzzer target: tileattn::attention_forward / attention_backward on tiny problems decoded from
// the input bytes, on the reference backend and on the CPU backend (one thread, a fuzzed ISA cap).
//
// Shapes, dtypes (including values outside the enums), strides (zero, overlapping, padded,
// permuted, negative, overflowing 64-bit offsets), every option and the values (NaN and Inf
// included) come from the input. Every buffer is allocated to exactly the span its strides
// address, so ASan reports any read or write outside a view. tileattn::Error is the expected
// outcome of an invalid argument; everything else the target checks ends in __builtin_trap() so
// that libFuzzer saves the input:
//   - both backends throw for the same arguments, and a call that throws wrote nothing;
//   - a call that succeeds has plainly valid scalar arguments and in-range key_lengths, wrote
//     every element its outputs' views cover and nothing else of their buffers;
//   - a tensor whose strides overflow 64-bit offsets, or an output sharing a buffer with an input,
//     is rejected;
//   - with finite inputs and injective output views, the CPU results agree with the reference
//     within a tolerance derived from the storage types and the score magnitudes.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "common/float_convert.hpp"
#include "tileattn/tileattn.hpp"

namespace {

using tileattn::DType;
using tileattn::Tensor;

constexpr std::int64_t kMaxElements = std::int64_t{1}
                                      << 20;  // larger (non-overflowing) spans: skip
constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
constexpr float kInf = std::numeric_limits<float>::infinity();

// What the strides of a view address.
struct Span {
  enum Kind { fits, empty, overflows, invalid } kind = empty;
  std::int64_t elements = 0;  // for `fits`: last offset + 1
};

Span span_of(const Tensor& t) {
  if (t.rank < 0 || t.rank > 4) return {Span::invalid, 0};
  __int128 last = 0;
  bool empty = false;
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] < 0 || t.stride[d] < 0) return {Span::invalid, 0};
    if (t.shape[d] == 0) empty = true;
    if (t.shape[d] > 1) last += static_cast<__int128>(t.shape[d] - 1) * t.stride[d];
  }
  if ((last + 1) * static_cast<__int128>(tileattn::size_of(t.dtype)) > kInt64Max)
    return {Span::overflows, 0};
  if (empty) return {Span::empty, 0};
  return {Span::fits, static_cast<std::int64_t>(last + 1)};
}

// Calls f(offset) for every element of the view, in row-major logical order.
template <typename F>
void for_each_offset(const Tensor& t, F&& f) {
  std::int64_t shape[4] = {1, 1, 1, 1}, stride[4] = {0, 0, 0, 0};
  for (int d = 0; d < t.rank; ++d) {
    shape[4 - t.rank + d] = t.shape[d];
    stride[4 - t.rank + d] = t.stride[d];
  }
  for (std::int64_t i0 = 0; i0 < shape[0]; ++i0)
    for (std::int64_t i1 = 0; i1 < shape[1]; ++i1)
      for (std::int64_t i2 = 0; i2 < shape[2]; ++i2)
        for (std::int64_t i3 = 0; i3 < shape[3]; ++i3)
          f(i0 * stride[0] + i1 * stride[1] + i2 * stride[2] + i3 * stride[3]);
}

// A distinctive NaN bit pattern per element size, which no computation produces. Two bytes:
// 0x7fa5 is a NaN both as f16 and as bf16 (a signalling one there, which arithmetic never
// yields); 0x7e5a, a NaN as f16, is the finite bf16 7.24e37, which an output can hold.
void sentinel_of(std::size_t element_size, std::byte* out) {
  const std::uint64_t pattern = element_size == 2   ? 0x7fa5
                                : element_size == 4 ? 0x7fe5a5a5
                                : element_size == 8 ? 0x7ffca5a5a5a5a5a5
                                                    : 0xa5;
  std::memcpy(out, &pattern, element_size);  // little-endian: the low bytes
}

// The storage of one tensor: exactly the elements its strides address (at least one, so that
// the data pointer is present even for an empty view).
struct Buffer {
  std::vector<std::byte> bytes;
  std::size_t element_size = 1;

  void allocate(const Tensor& t, std::int64_t elements) {
    element_size = tileattn::size_of(t.dtype);
    bytes.assign(static_cast<std::size_t>(std::max<std::int64_t>(elements, 1)) * element_size,
                 std::byte{0});
  }
  std::int64_t elements() const { return static_cast<std::int64_t>(bytes.size() / element_size); }
  void poison() {
    for (std::size_t i = 0; i < bytes.size(); i += element_size)
      sentinel_of(element_size, bytes.data() + i);
  }
  bool poisoned(std::int64_t i) const {
    std::byte s[8];
    sentinel_of(element_size, s);
    return std::memcmp(bytes.data() + static_cast<std::size_t>(i) * element_size, s,
                       element_size) == 0;
  }
  bool all_poisoned() const {
    for (std::int64_t i = 0; i < elements(); ++i)
      if (!poisoned(i)) return false;
    return true;
  }
};

// Every element in the view written, nothing outside it; `injective`: no element is addressed
// twice (the results can then be compared element by element).
bool written_exactly(const Tensor& t, const Buffer& b, bool& injective) {
  std::vector<std::uint8_t> hits(static_cast<std::size_t>(b.elements()), 0);
  injective = true;
  for_each_offset(t, [&](std::int64_t off) {
    if (hits[static_cast<std::size_t>(off)]++) injective = false;
  });
  for (std::int64_t i = 0; i < b.elements(); ++i)
    if (b.poisoned(i) != (hits[static_cast<std::size_t>(i)] == 0)) return false;
  return true;
}

// Ranks up to 5 by default; FUZZ_ATTENTION_MAX_RANK=4 steers a local run away from a known
// finding about ranks above 4 so that it can find others.
int max_rank() {
  static const int rank = [] {
    const char* env = std::getenv("FUZZ_ATTENTION_MAX_RANK");
    return env ? std::clamp(std::atoi(env), 0, 5) : 5;
  }();
  return rank;
}

class Decoder {
 public:
  Decoder(const std::uint8_t* data, std::size_t size) : fdp_(data, size) {}

  template <typename T>
  T in(T lo, T hi) {
    return fdp_.ConsumeIntegralInRange<T>(lo, hi);
  }
  bool one_in(int n) { return in(0, n - 1) == 0; }
  bool flag() { return fdp_.ConsumeBool(); }
  template <typename T>
  T any() {
    return fdp_.ConsumeIntegral<T>();
  }

  // Usually a valid float storage type, sometimes any other DType value (enumerated or not).
  DType float_dtype() {
    if (one_in(24)) return static_cast<DType>(in<std::uint8_t>(3, 255));
    return static_cast<DType>(in(0, 2));
  }

  // Strides for a view of `t.shape`: mostly ordinary layouts, sometimes broken ones.
  void strides(Tensor& t) {
    std::int64_t contiguous[4] = {};
    std::int64_t s = 1;
    for (int d = t.rank - 1; d >= 0; --d) {
      contiguous[d] = s;
      s *= std::max<std::int64_t>(t.shape[d], 1);
    }
    std::copy(contiguous, contiguous + 4, t.stride);
    if (t.rank == 0) return;
    const int d = in(0, t.rank - 1);
    switch (in(0, 15)) {
      case 0:
      case 1:
      case 2:
      case 3:
      case 4:
      case 5: break;  // contiguous
      case 6:
      case 7:  // [B, H, L, D] memory seen as [B, L, H, D]
        if (t.rank == 4) {
          t.stride[3] = 1;
          t.stride[1] = std::max<std::int64_t>(t.shape[3], 1);
          t.stride[2] = t.stride[1] * std::max<std::int64_t>(t.shape[1], 1);
          t.stride[0] = t.stride[2] * std::max<std::int64_t>(t.shape[2], 1);
        }
        break;
      case 8:
      case 9: {  // padded rows
        std::int64_t next = 1;
        for (int e = t.rank - 1; e >= 0; --e) {
          t.stride[e] = next;
          next *= std::max<std::int64_t>(t.shape[e], 1) + in(0, 3);
        }
        break;
      }
      case 10:
      case 11: t.stride[d] = 0; break;  // repeated elements (overlapping view)
      case 12:                          // anything small, the inner dimension included
        for (int e = 0; e < t.rank; ++e) t.stride[e] = in(0, 48);
        break;
      case 13: t.stride[d] = in<std::int64_t>(0, 3); break;
      case 14: {  // offsets that overflow 64 bits (or huge non-overflowing ones, then skipped)
        const std::int64_t huge[] = {kInt64Max,
                                     kInt64Max / 2,
                                     kInt64Max / 3 + 1,
                                     std::int64_t{1} << 62,
                                     std::int64_t{1} << 61,
                                     std::int64_t{1} << 32};
        t.stride[d] = huge[in(0, 5)];
        break;
      }
      default: t.stride[d] = -in<std::int64_t>(1, 3); break;  // negative
    }
  }

  // A view of rank 1..4 with the given shape; sometimes a wrong rank or a wrong dimension.
  Tensor view(DType dtype, std::initializer_list<std::int64_t> shape) {
    Tensor t;
    t.dtype = dtype;
    t.rank = static_cast<int>(shape.size());
    std::copy(shape.begin(), shape.end(), t.shape);
    if (one_in(40)) t.shape[in(0, t.rank - 1)] = in<std::int64_t>(-1, 41);
    strides(t);
    // The library must look at no dimension beyond the 4 a Tensor holds.
    if (one_in(60)) t.rank = in(-1, max_rank());
    return t;
  }

  // An ordinary value scale, the special values sometimes mixed into float inputs.
  float value_range() {
    const float ranges[] = {0.01f, 0.5f, 1.0f, 2.0f, 4.0f, 8.0f};
    return ranges[in(0, 5)];
  }
  float special() {
    const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                              kInf,
                              -kInf,
                              3.0e38f,
                              -3.0e38f,
                              1.0e-40f,
                              0.0f,
                              -0.0f,
                              65504.0f,
                              1.0e5f};
    return specials[in(0, 9)];
  }

  std::uint64_t seed() { return any<std::uint64_t>(); }

 private:
  FuzzedDataProvider fdp_;
};

// The values of the inputs: a small generator seeded from the input (the input bytes would run
// out long before a 40 x 4 x 40 tensor is filled), plus a few specials at chosen places.
class Values {
 public:
  explicit Values(std::uint64_t seed) : state_(seed | 1) {}
  std::uint64_t next() {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    return state_;
  }
  float uniform(float range) {  // in [-range, range]
    return range * (static_cast<float>(next() >> 40) / static_cast<float>(1 << 23) - 1.0f);
  }

 private:
  std::uint64_t state_;
};

struct Stats {
  float max_abs = 0.0f;
  bool finite = true;  // no NaN or Inf (an f32 mask may hold -inf: a masked score)
};

Stats fill_floats(Decoder& dec, Values& values, Buffer& b, DType dtype, float range,
                  bool allow_minus_inf = false) {
  Stats stats;
  const bool is_float = dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16;
  if (!is_float) {
    for (auto& byte : b.bytes) byte = static_cast<std::byte>(values.next());
    stats.finite = false;
    return stats;
  }
  const std::int64_t n = b.elements();
  for (std::int64_t i = 0; i < n; ++i)
    tileattn::detail::store_from_f32(b.bytes.data(), dtype, i, values.uniform(range));
  for (int specials = dec.one_in(4) ? dec.in(1, 3) : 0; specials > 0; --specials)
    tileattn::detail::store_from_f32(b.bytes.data(), dtype, dec.in<std::int64_t>(0, n - 1),
                                     dec.special());
  for (std::int64_t i = 0; i < n; ++i) {
    const float x = tileattn::detail::load_as_f32(b.bytes.data(), dtype, i);
    if (std::isfinite(x))
      stats.max_abs = std::max(stats.max_abs, std::fabs(x));
    else if (!(allow_minus_inf && x == -kInf))
      stats.finite = false;
  }
  return stats;
}

// A tensor and its storage.
struct Slot {
  Tensor t;
  Span span;
  Buffer buffer;
  bool present = false;
};

// Allocates `slot` over its view's span; false when the span is too large to allocate.
bool place(Slot& slot) {
  slot.span = span_of(slot.t);
  if (slot.span.kind == Span::fits && slot.span.elements > kMaxElements) return false;
  slot.buffer.allocate(slot.t, slot.span.kind == Span::fits ? slot.span.elements : 1);
  slot.t.data = slot.buffer.bytes.data();
  return true;
}

bool is_float_storage(DType d) {
  return d == DType::f32 || d == DType::f16 || d == DType::bf16;
}
bool is_16bit(DType d) {
  return d == DType::f16 || d == DType::bf16;
}

float element(const Slot& s, std::int64_t off) {
  return tileattn::detail::load_as_f32(s.buffer.bytes.data(), s.t.dtype, off);
}

std::int64_t key_length(const Slot& kl, std::int64_t b) {
  const std::int64_t off = b * kl.t.stride[0];
  if (kl.t.dtype == DType::i32) {
    std::int32_t v;
    std::memcpy(&v, kl.buffer.bytes.data() + off * 4, 4);
    return v;
  }
  std::int64_t v;
  std::memcpy(&v, kl.buffer.bytes.data() + off * 8, 8);
  return v;
}

// Scalar arguments that no successful call may have.
bool plainly_invalid(const tileattn::AttentionArgs& a) {
  const Tensor& q = a.q;
  if (q.rank != 4 || !is_float_storage(q.dtype) || !is_float_storage(a.out.dtype)) return true;
  if (a.k.dtype != q.dtype || a.v.dtype != q.dtype) return true;
  const std::int64_t D = q.shape[3], Dv = a.v.shape[3], Hq = q.shape[2], Hkv = a.k.shape[2];
  if (q.shape[0] < 1 || Hq < 1 || Hkv < 1 || Hq % Hkv != 0) return true;
  if (D < 1 || D > 256 || Dv < 1 || Dv > 256) return true;
  if (!std::isfinite(a.softcap) || a.softcap < 0.0f) return true;
  if (!(a.dropout_p >= 0.0f && a.dropout_p < 1.0f)) return true;
  if (a.window_left < -1 || a.window_right < -1) return true;
  if (a.alignment != tileattn::Alignment::bottom_right &&
      a.alignment != tileattn::Alignment::top_left)
    return true;
  return false;
}

struct Problem {
  tileattn::AttentionBackwardArgs args;
  Slot q, k, v, mask, key_lengths, alibi, dout;
  Slot out_ref, out_cpu, lse_ref, lse_cpu;  // the forward's outputs, one set per backend
  Slot dq_ref, dk_ref, dv_ref, dq_cpu, dk_cpu, dv_cpu;
  bool backward = false;
  bool out_aliases_input = false;  // out's data pointer is q's
  bool must_throw = false;         // a view overflows or has negative strides/sizes
  bool inputs_finite = true;
  float max_q = 0, max_k = 0, max_v = 0, max_mask = 0, max_slope = 0, max_dout = 0;
  tileattn::CpuIsa isa = tileattn::CpuIsa::best;
};

void set(Slot& s, const Tensor& t) {
  s.t = t;
  s.present = true;
}

// Decodes the shapes, layouts and options.
void decode(Decoder& dec, Problem& p) {
  auto& a = p.args;
  const std::int64_t B = dec.one_in(40) ? dec.in(-1, 3) : dec.in(1, 2);
  const std::int64_t Lq = dec.in(0, 40), Lk = dec.in(0, 40);
  const std::int64_t Hkv = dec.one_in(40) ? 0 : dec.in(1, 4);
  // Mostly a multiple of Hkv (GQA / MQA), sometimes any head count.
  const std::int64_t Hq =
      dec.one_in(6) || Hkv < 1 ? dec.in(1, 4) : Hkv * dec.in<std::int64_t>(1, 4 / Hkv);
  const auto head_dim = [&] {
    if (dec.one_in(30)) return dec.flag() ? std::int64_t{0} : dec.in<std::int64_t>(257, 300);
    return dec.in<std::int64_t>(1, 40);
  };
  const std::int64_t D = head_dim(), Dv = dec.one_in(3) ? head_dim() : D;
  const DType dtype = dec.float_dtype();
  const DType out_dtype = dec.flag() ? dtype : dec.float_dtype();
  const auto maybe_other = [&](DType d) { return dec.one_in(40) ? dec.float_dtype() : d; };

  set(p.q, dec.view(dtype, {B, Lq, Hq, D}));
  set(p.k, dec.view(maybe_other(dtype), {B, Lk, Hkv, D}));
  set(p.v, dec.view(maybe_other(dtype), {B, Lk, Hkv, Dv}));
  set(p.out_ref, dec.view(out_dtype, {B, Lq, Hq, Dv}));
  p.out_aliases_input = dec.one_in(50);
  if (dec.flag()) set(p.lse_ref, dec.view(maybe_other(DType::f32), {B, Hq, Lq}));

  a.causal = dec.flag();
  a.alignment = dec.one_in(30) ? static_cast<tileattn::Alignment>(dec.in<std::uint8_t>(2, 255))
                               : static_cast<tileattn::Alignment>(dec.in(0, 1));
  const auto window = [&]() -> std::int64_t {
    switch (dec.in(0, 7)) {
      case 0:
      case 1: return dec.in<std::int64_t>(0, 45);
      case 2: return dec.flag() ? -2 : kInt64Max;
      default: return -1;
    }
  };
  a.window_left = window();
  a.window_right = window();
  const bool have_scale = dec.one_in(3);
  const float scale =
      dec.one_in(10) ? dec.special() : 4.0f * (static_cast<float>(dec.in(0, 255)) / 128.0f - 1.0f);
  if (have_scale) a.scale = scale;
  if (dec.one_in(4))
    a.softcap = dec.one_in(8) ? dec.special() : 0.5f * static_cast<float>(dec.in(1, 100));
  if (dec.one_in(5)) {
    a.dropout_p = dec.one_in(8) ? dec.special() : static_cast<float>(dec.in(0, 99)) / 100.0f;
    a.dropout_seed = dec.seed();
    a.dropout_offset = dec.seed();
  }
  p.isa = dec.one_in(6) ? tileattn::CpuIsa::best : static_cast<tileattn::CpuIsa>(dec.in(0, 4));

  if (dec.one_in(3)) {  // a mask of rank 2..4, each dimension full or broadcast
    const int rank = dec.in(2, 4);
    const std::int64_t full[4] = {B, Hq, Lq, Lk};
    std::int64_t m[4];
    for (int d = 0; d < rank; ++d) m[d] = dec.flag() ? full[4 - rank + d] : 1;
    const DType mdtype = dec.one_in(30) ? static_cast<DType>(dec.in(0, 255))
                         : dec.flag()   ? DType::boolean
                                        : DType::f32;
    set(p.mask, rank == 2   ? dec.view(mdtype, {m[0], m[1]})
                : rank == 3 ? dec.view(mdtype, {m[0], m[1], m[2]})
                            : dec.view(mdtype, {m[0], m[1], m[2], m[3]}));
  }
  if (dec.one_in(4)) {
    const DType kdtype = dec.one_in(30) ? static_cast<DType>(dec.in(0, 255))
                         : dec.flag()   ? DType::i32
                                        : DType::i64;
    set(p.key_lengths, dec.view(kdtype, {B}));
  }
  if (dec.one_in(5))
    set(p.alibi, dec.flag() ? dec.view(maybe_other(DType::f32), {Hq})
                            : dec.view(maybe_other(DType::f32), {B, Hq}));

  p.backward = dec.one_in(3);
  if (p.backward) {
    set(p.dout, dec.view(dec.flag() ? out_dtype : dec.float_dtype(), {B, Lq, Hq, Dv}));
    set(p.dq_ref, dec.view(dec.flag() ? dtype : dec.float_dtype(), {B, Lq, Hq, D}));
    set(p.dk_ref, dec.view(dec.flag() ? dtype : dec.float_dtype(), {B, Lk, Hkv, D}));
    set(p.dv_ref, dec.view(dec.flag() ? dtype : dec.float_dtype(), {B, Lk, Hkv, Dv}));
    a.deterministic = dec.flag();
  }
  // Each backend writes its own outputs, laid out alike.
  p.out_cpu = p.out_ref;
  p.lse_cpu = p.lse_ref;
  p.dq_cpu = p.dq_ref;
  p.dk_cpu = p.dk_ref;
  p.dv_cpu = p.dv_ref;
}

std::vector<Slot*> all_slots(Problem& p) {
  return {&p.q,      &p.k,       &p.v,       &p.mask,    &p.key_lengths, &p.alibi,
          &p.dout,   &p.out_ref, &p.out_cpu, &p.lse_ref, &p.lse_cpu,     &p.dq_ref,
          &p.dk_ref, &p.dv_ref,  &p.dq_cpu,  &p.dk_cpu,  &p.dv_cpu};
}

// Fills the inputs; records their magnitudes and whether all are finite.
void fill(Decoder& dec, Problem& p) {
  Values values(dec.seed());
  const float range = dec.value_range();
  const auto floats = [&](Slot& s, float& max_abs, float r) {
    if (!s.present) return;
    const Stats st = fill_floats(dec, values, s.buffer, s.t.dtype, r);
    max_abs = st.max_abs;
    p.inputs_finite = p.inputs_finite && st.finite;
  };
  floats(p.q, p.max_q, range);
  floats(p.k, p.max_k, range);
  floats(p.v, p.max_v, range);
  floats(p.alibi, p.max_slope, dec.flag() ? 0.1f : 1.0f);
  floats(p.dout, p.max_dout, range);

  Slot& m = p.mask;
  if (m.present) {
    if (m.t.dtype == DType::boolean) {
      const std::uint64_t denial = dec.in(0, 4);  // in 4ths: how often an element is false
      for (auto& byte : m.buffer.bytes)
        byte =
            values.next() % 4 < denial ? std::byte{0} : static_cast<std::byte>(values.next() | 1);
    } else if (m.t.dtype == DType::f32) {
      const Stats st = fill_floats(dec, values, m.buffer, m.t.dtype, range, true);
      const std::uint64_t masked = dec.in(0, 4);
      auto* f = reinterpret_cast<float*>(m.buffer.bytes.data());
      for (std::int64_t i = 0; i < m.buffer.elements(); ++i)
        if (values.next() % 4 < masked) f[i] = -kInf;
      p.max_mask = st.max_abs;
      p.inputs_finite = p.inputs_finite && st.finite;
    } else {
      for (auto& byte : m.buffer.bytes) byte = static_cast<std::byte>(values.next());
    }
  }

  Slot& kl = p.key_lengths;
  if (kl.present) {
    const std::int64_t Lk = p.k.t.shape[1];
    for (std::int64_t i = 0; i < kl.buffer.elements(); ++i) {
      std::int64_t len = dec.in<std::int64_t>(0, std::max<std::int64_t>(Lk, 0));
      if (dec.one_in(16)) {
        const std::int64_t odd[] = {-1,
                                    Lk + 1,
                                    std::int64_t{1} << 32,
                                    kInt64Max,
                                    std::numeric_limits<std::int64_t>::min(),
                                    std::numeric_limits<std::int32_t>::min()};
        len = odd[dec.in(0, 5)];
      }
      if (kl.t.dtype == DType::i32) {
        const auto v = static_cast<std::int32_t>(len);
        std::memcpy(kl.buffer.bytes.data() + i * 4, &v, 4);
      } else if (kl.t.dtype == DType::i64) {
        std::memcpy(kl.buffer.bytes.data() + i * 8, &len, 8);
      } else {
        for (auto& byte : kl.buffer.bytes) byte = static_cast<std::byte>(values.next());
      }
    }
  }
}

void describe(const char* name, const Slot& s) {
  if (!s.present) return;
  std::fprintf(stderr,
               "  %-11s %-7s rank %d shape [%lld %lld %lld %lld] stride [%lld %lld %lld %lld]\n",
               name, tileattn::to_string(s.t.dtype), s.t.rank, static_cast<long long>(s.t.shape[0]),
               static_cast<long long>(s.t.shape[1]), static_cast<long long>(s.t.shape[2]),
               static_cast<long long>(s.t.shape[3]), static_cast<long long>(s.t.stride[0]),
               static_cast<long long>(s.t.stride[1]), static_cast<long long>(s.t.stride[2]),
               static_cast<long long>(s.t.stride[3]));
}

// The problem being run, printed with a finding so that a saved input can be read.
const Problem* current = nullptr;

void describe(const Problem& p) {
  {
    const auto& a = p.args;
    describe("q", p.q), describe("k", p.k), describe("v", p.v), describe("out", p.out_ref);
    describe("lse", p.lse_ref), describe("mask", p.mask), describe("key_lengths", p.key_lengths);
    describe("alibi", p.alibi), describe("dout", p.dout), describe("dq", p.dq_ref);
    describe("dk", p.dk_ref), describe("dv", p.dv_ref);
    std::fprintf(stderr,
                 "  causal %d alignment %d window (%lld, %lld) scale %g softcap %g dropout %g "
                 "(seed %llu offset %llu) deterministic %d isa %s out_aliases_q %d backward %d\n",
                 a.causal, static_cast<int>(a.alignment), static_cast<long long>(a.window_left),
                 static_cast<long long>(a.window_right),
                 static_cast<double>(a.scale.value_or(0.0f)), static_cast<double>(a.softcap),
                 static_cast<double>(a.dropout_p), static_cast<unsigned long long>(a.dropout_seed),
                 static_cast<unsigned long long>(a.dropout_offset), a.deterministic,
                 tileattn::to_string(p.isa), p.out_aliases_input, p.backward);
    std::fprintf(stderr,
                 "  inputs finite %d, max |q| %g |k| %g |v| %g |mask| %g |slope| %g |dout| %g\n",
                 p.inputs_finite, static_cast<double>(p.max_q), static_cast<double>(p.max_k),
                 static_cast<double>(p.max_v), static_cast<double>(p.max_mask),
                 static_cast<double>(p.max_slope), static_cast<double>(p.max_dout));
  }
}

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_attention finding: %s\n", what);
  if (current) describe(*current);
  __builtin_trap();
}

tileattn::AttentionArgs forward_args(const Problem& p, const Slot& out, const Slot& lse) {
  tileattn::AttentionArgs a = p.args;
  a.q = p.q.t;
  a.k = p.k.t;
  a.v = p.v.t;
  a.out = out.t;
  if (p.out_aliases_input) a.out.data = p.q.t.data;
  a.lse = lse.present ? lse.t : Tensor{};
  a.mask = p.mask.present ? p.mask.t : Tensor{};
  a.key_lengths = p.key_lengths.present ? p.key_lengths.t : Tensor{};
  a.alibi_slopes = p.alibi.present ? p.alibi.t : Tensor{};
  return a;
}

bool run_forward(const Problem& p, tileattn::Backend backend, const Slot& out, const Slot& lse) {
  const tileattn::AttentionArgs a = forward_args(p, out, lse);
  try {
    tileattn::attention_forward(a, {.backend = backend, .threads = 1, .cpu_isa = p.isa});
  } catch (const tileattn::Error&) {
    return false;
  }
  return true;
}

// The backward reads the reference forward's out and lse.
bool run_backward(const Problem& p, tileattn::Backend backend, const Slot& dq, const Slot& dk,
                  const Slot& dv) {
  tileattn::AttentionBackwardArgs a = p.args;
  a.q = p.q.t;
  a.k = p.k.t;
  a.v = p.v.t;
  a.out = p.out_ref.t;
  if (p.out_aliases_input) a.out.data = p.q.t.data;
  a.lse = p.lse_ref.present ? p.lse_ref.t : Tensor{};
  a.mask = p.mask.present ? p.mask.t : Tensor{};
  a.key_lengths = p.key_lengths.present ? p.key_lengths.t : Tensor{};
  a.alibi_slopes = p.alibi.present ? p.alibi.t : Tensor{};
  a.dout = p.dout.t;
  a.dq = dq.t;
  a.dk = dk.t;
  a.dv = dv.t;
  try {
    tileattn::attention_backward(a, {.backend = backend, .threads = 1, .cpu_isa = p.isa});
  } catch (const tileattn::Error&) {
    return false;
  }
  return true;
}

// |cpu - ref| <= tol element by element over the view; a value that is finite on one side only
// is a finding too when `strict` (no input magnitude that could overflow f32 on the way).
void compare(const char* name, const Slot& ref, const Slot& cpu, double tol, bool strict) {
  for_each_offset(ref.t, [&](std::int64_t off) {
    const float r = element(ref, off), c = element(cpu, off);
    const bool both_finite = std::isfinite(r) && std::isfinite(c);
    // Non-finite on both sides agrees only when equal (e.g. both -inf: a fully masked row's
    // lse) or both NaN (a poisoned row).
    const bool same = r == c || (std::isnan(r) && std::isnan(c));
    if ((both_finite && std::fabs(static_cast<double>(r) - c) > tol) ||
        (!both_finite && strict && !same)) {
      std::fprintf(stderr, "%s at offset %lld: reference %.9g, cpu %.9g, tolerance %.3g\n", name,
                   static_cast<long long>(off), static_cast<double>(r), static_cast<double>(c),
                   tol);
      finding("the cpu backend disagrees with the reference");
    }
  });
}

// The bound on score magnitudes and the resulting f32 error in a score.
struct Conditioning {
  double max_score = 0;  // bound on |s| (after scale, softcap, ALiBi, additive mask)
  double score_error = 0;
  double keep_scale = 1;
  bool moderate = false;  // nothing near f32 or f16 overflow
};

Conditioning conditioning(const Problem& p) {
  const auto& a = p.args;
  const double D = static_cast<double>(p.q.t.shape[3]);
  const double Lq = static_cast<double>(p.q.t.shape[1]), Lk = static_cast<double>(p.k.t.shape[1]);
  const double scale = a.scale.has_value() ? *a.scale : 1.0 / std::sqrt(D);
  Conditioning c;
  c.max_score = std::fabs(scale) * D * p.max_q * p.max_k;
  if (a.softcap > 0.0f) c.max_score = std::min<double>(c.max_score, a.softcap);
  c.max_score += p.max_slope * (Lq + 2 * Lk) + p.max_mask;
  c.score_error =
      (D + 8) * std::ldexp(1.0, -24) * (c.max_score + 1) + std::ldexp(1.0, -22) * (c.max_score + 8);
  if (a.dropout_p > 0.0f) c.keep_scale = 1.0 / (1.0 - a.dropout_p);
  c.moderate = c.max_score < 1e4 && p.max_v * c.keep_scale < 1e4 && p.max_dout < 1e4 &&
               std::fabs(scale) < 1e4;
  return c;
}

void check_key_lengths(const Problem& p) {
  const Slot& kl = p.key_lengths;
  if (!kl.present) return;
  for (std::int64_t b = 0; b < kl.t.shape[0]; ++b) {
    const std::int64_t len = key_length(kl, b);
    if (len < 0 || len > p.k.t.shape[1]) finding("accepted an out-of-range key length");
  }
}

bool any_invalid_span(std::initializer_list<const Slot*> slots) {
  for (const Slot* s : slots)
    if (s->present && (s->span.kind == Span::overflows || s->span.kind == Span::invalid))
      return true;
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using tileattn::Backend;
  Decoder dec(data, size);
  Problem p;
  decode(dec, p);
  current = &p;
  // FUZZ_ATTENTION_VERBOSE=1: print every decoded problem (to read a saved input).
  static const bool verbose = std::getenv("FUZZ_ATTENTION_VERBOSE") != nullptr;
  if (verbose) describe(p);
  for (Slot* s : all_slots(p))
    if (s->present && !place(*s)) return 0;  // a legitimately huge view: not allocatable here
  fill(dec, p);
  for (Slot* s : {&p.out_ref, &p.out_cpu, &p.lse_ref, &p.lse_cpu, &p.dq_ref, &p.dk_ref, &p.dv_ref,
                  &p.dq_cpu, &p.dk_cpu, &p.dv_cpu})
    s->buffer.poison();

  // Forward: the same verdict from both backends; a rejected call writes nothing.
  const bool ok_ref = run_forward(p, Backend::reference, p.out_ref, p.lse_ref);
  const bool ok_cpu = run_forward(p, Backend::cpu, p.out_cpu, p.lse_cpu);
  if (ok_ref != ok_cpu) finding("the forward backends disagree on validity");
  const bool forward_must_throw =
      any_invalid_span(
          {&p.q, &p.k, &p.v, &p.out_ref, &p.lse_ref, &p.mask, &p.key_lengths, &p.alibi}) ||
      plainly_invalid(forward_args(p, p.out_ref, p.lse_ref)) ||
      (p.out_aliases_input && p.q.span.kind == Span::fits && p.out_ref.span.kind == Span::fits);
  const Conditioning cond = conditioning(p);
  if (!ok_ref) {
    for (const Slot* s : {&p.out_ref, &p.out_cpu, &p.lse_ref, &p.lse_cpu})
      if (!s->buffer.all_poisoned()) finding("a rejected forward wrote its outputs");
  } else {
    if (forward_must_throw) finding("the forward accepted invalid arguments");
    check_key_lengths(p);
    bool comparable = p.inputs_finite && !p.out_aliases_input;
    for (auto [ref, cpu] : {std::pair{&p.out_ref, &p.out_cpu}, std::pair{&p.lse_ref, &p.lse_cpu}}) {
      if (!ref->present || p.out_aliases_input) continue;
      bool injective_ref = true, injective_cpu = true;
      if (!written_exactly(ref->t, ref->buffer, injective_ref))
        finding("reference output not written exactly");
      if (!written_exactly(cpu->t, cpu->buffer, injective_cpu))
        finding("cpu output not written exactly");
      comparable = comparable && injective_ref;
    }
    if (comparable) {
      const bool wide = is_16bit(p.q.t.dtype) || is_16bit(p.out_ref.t.dtype);
      const double base = wide ? 1e-2 : 1e-4;
      compare("out", p.out_ref, p.out_cpu,
              p.max_v * cond.keep_scale * (base + 4 * cond.score_error), cond.moderate);
      if (p.lse_ref.present) {
        // lse is f32-accurate at every storage type; tolerance relative to its magnitude.
        const double lse_tol =
            1e-4 * (1 + cond.max_score + std::log1p(p.k.t.shape[1])) + 4 * cond.score_error;
        compare("lse", p.lse_ref, p.lse_cpu, lse_tol, cond.moderate);
      }
    }
  }
  if (!p.backward) return 0;

  const bool bok_ref = run_backward(p, Backend::reference, p.dq_ref, p.dk_ref, p.dv_ref);
  const bool bok_cpu = run_backward(p, Backend::cpu, p.dq_cpu, p.dk_cpu, p.dv_cpu);
  if (bok_ref != bok_cpu) finding("the backward backends disagree on validity");
  if (!bok_ref) {
    for (const Slot* s : {&p.dq_ref, &p.dk_ref, &p.dv_ref, &p.dq_cpu, &p.dk_cpu, &p.dv_cpu})
      if (!s->buffer.all_poisoned()) finding("a rejected backward wrote its gradients");
    return 0;
  }
  // The backward checks every forward argument the forward checks (and requires lse).
  if (!ok_ref || !p.lse_ref.present) finding("the backward accepted what the forward rejects");
  if (any_invalid_span({&p.dout, &p.dq_ref, &p.dk_ref, &p.dv_ref}))
    finding("the backward accepted an overflowing or negative view");
  bool comparable = p.inputs_finite && !p.out_aliases_input && cond.moderate;
  for (auto [ref, cpu] : {std::pair{&p.dq_ref, &p.dq_cpu}, std::pair{&p.dk_ref, &p.dk_cpu},
                          std::pair{&p.dv_ref, &p.dv_cpu}}) {
    bool injective_ref = true, injective_cpu = true;
    if (!written_exactly(ref->t, ref->buffer, injective_ref))
      finding("reference output not written exactly");
    if (!written_exactly(cpu->t, cpu->buffer, injective_cpu))
      finding("cpu output not written exactly");
    comparable = comparable && injective_ref;
  }
  // out and lse (inputs here) must hold one value per element for the gradients to agree.
  for (const Slot* s : {&p.out_ref, &p.lse_ref}) {
    bool injective = true;
    written_exactly(s->t, s->buffer, injective);
    comparable = comparable && injective;
  }
  if (!comparable) return 0;
  // Bounds on the gradients' magnitudes (|dP - delta| <= 2 Dv max|dout| max|v| keep_scale, each
  // P <= 1, a softcap's derivative <= 1), times the relative error of the storage types.
  const auto& a = p.args;
  const double D = static_cast<double>(p.q.t.shape[3]), Dv = static_cast<double>(p.v.t.shape[3]);
  const double Lq = static_cast<double>(p.q.t.shape[1]);
  const double group = static_cast<double>(p.q.t.shape[2] / p.k.t.shape[2]);
  const double scale = std::fabs(a.scale.has_value() ? *a.scale : 1.0 / std::sqrt(D));
  const double dp = 2 * Dv * p.max_dout * p.max_v * cond.keep_scale;
  const bool wide =
      is_16bit(p.q.t.dtype) || is_16bit(p.out_ref.t.dtype) || is_16bit(p.dout.t.dtype);
  const auto tol = [&](const Slot& g, double bound) {
    const double base = wide || is_16bit(g.t.dtype) ? 1e-2 : 1e-4;
    return bound * (base + 4 * cond.score_error);
  };
  compare("dq", p.dq_ref, p.dq_cpu, tol(p.dq_ref, scale * p.max_k * dp), true);
  compare("dk", p.dk_ref, p.dk_cpu, tol(p.dk_ref, scale * p.max_q * dp * Lq * group), true);
  compare("dv", p.dv_ref, p.dv_cpu, tol(p.dv_ref, cond.keep_scale * p.max_dout * Lq * group), true);
  return 0;
}
