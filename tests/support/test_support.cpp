#include "test_support.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>

#include "api/validate.hpp"
#include "common/float_convert.hpp"
#include "common/score_mods.hpp"

namespace tileattn::test {
namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : s) {
    h ^= static_cast<std::uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

// Bit patterns: the output poison (a quiet NaN) and the padding canary (a NaN with a payload
// that no arithmetic produces, and that is a NaN in both f16 and bf16).
constexpr std::uint32_t kPoisonF32 = 0x7fc00000u, kCanaryF32 = 0x7fa5a5a5u;
constexpr std::uint16_t kPoisonF16 = 0x7e00u, kPoisonBF16 = 0x7fc0u, kCanary16 = 0x7fa5u;
constexpr std::uint8_t kCanaryByte = 0xa5u;

void store_pattern(std::uint8_t* base, DType dtype, std::int64_t index, bool canary) {
  const std::size_t size = size_of(dtype);
  std::uint8_t* p = base + index * static_cast<std::int64_t>(size);
  switch (dtype) {
    case DType::f32: {
      const std::uint32_t bits = canary ? kCanaryF32 : kPoisonF32;
      std::memcpy(p, &bits, 4);
      break;
    }
    case DType::f16:
    case DType::bf16: {
      const std::uint16_t bits =
          canary ? kCanary16 : (dtype == DType::f16 ? kPoisonF16 : kPoisonBF16);
      std::memcpy(p, &bits, 2);
      break;
    }
    default: std::memset(p, kCanaryByte, size); break;
  }
}

bool holds_canary(const std::uint8_t* base, DType dtype, std::int64_t index) {
  const std::size_t size = size_of(dtype);
  const std::uint8_t* p = base + index * static_cast<std::int64_t>(size);
  switch (dtype) {
    case DType::f32: {
      std::uint32_t bits;
      std::memcpy(&bits, p, 4);
      return bits == kCanaryF32;
    }
    case DType::f16:
    case DType::bf16: {
      std::uint16_t bits;
      std::memcpy(&bits, p, 2);
      return bits == kCanary16;
    }
    default: return std::all_of(p, p + size, [](std::uint8_t b) { return b == kCanaryByte; });
  }
}

}  // namespace

// ---- Seeds and test size ----------------------------------------------------------------------

std::uint64_t run_seed() {
  static const std::uint64_t seed = [] {
    if (const char* env = std::getenv("TILEATTN_TEST_SEED"); env != nullptr && *env != '\0')
      return static_cast<std::uint64_t>(std::strtoull(env, nullptr, 0));
    std::random_device rd;
    return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  }();
  return seed;
}

std::uint64_t test_seed() {
  std::string name;
  if (const auto* info = ::testing::UnitTest::GetInstance()->current_test_info())
    name = std::string(info->test_suite_name()) + "." + info->name();
  return splitmix64(run_seed() ^ fnv1a(name));
}

std::string seed_note() {
  std::ostringstream os;
  os << "seed " << run_seed() << " (rerun with TILEATTN_TEST_SEED=" << run_seed()
     << " TILEATTN_TEST_SCALE=" << test_scale() << ")";
  return os.str();
}

// Sanitizer builds default to a smaller size (tests/support/CMakeLists.txt).
#ifndef TILEATTN_TEST_DEFAULT_SCALE
#define TILEATTN_TEST_DEFAULT_SCALE 1.0
#endif

double test_scale() {
  static const double scale = [] {
    double s = TILEATTN_TEST_DEFAULT_SCALE;
    if (const char* env = std::getenv("TILEATTN_TEST_SCALE"); env != nullptr && *env != '\0')
      s = std::strtod(env, nullptr);
    if (!(s > 0.0)) s = TILEATTN_TEST_DEFAULT_SCALE;
    return std::clamp(s, 0.01, 1.0);
  }();
  return scale;
}

std::int64_t scaled(std::int64_t n, std::int64_t minimum) {
  const auto s = static_cast<std::int64_t>(std::llround(static_cast<double>(n) * test_scale()));
  return std::max(s, minimum);
}

// ---- Elements ---------------------------------------------------------------------------------

float load_element(const void* base, DType dtype, std::int64_t index) {
  switch (dtype) {
    case DType::f32:
    case DType::f16:
    case DType::bf16: return detail::load_as_f32(base, dtype, index);
    case DType::boolean: return static_cast<const std::uint8_t*>(base)[index] != 0 ? 1.0f : 0.0f;
    case DType::i32: return static_cast<float>(static_cast<const std::int32_t*>(base)[index]);
    case DType::i64: return static_cast<float>(static_cast<const std::int64_t*>(base)[index]);
  }
  return 0.0f;
}

void store_element(void* base, DType dtype, std::int64_t index, float value) {
  switch (dtype) {
    case DType::f32:
    case DType::f16:
    case DType::bf16: detail::store_from_f32(base, dtype, index, value); break;
    case DType::boolean: static_cast<std::uint8_t*>(base)[index] = value != 0.0f ? 1 : 0; break;
    case DType::i32:
      static_cast<std::int32_t*>(base)[index] = static_cast<std::int32_t>(value);
      break;
    case DType::i64:
      static_cast<std::int64_t*>(base)[index] = static_cast<std::int64_t>(value);
      break;
  }
}

float round_to(DType dtype, float value) {
  switch (dtype) {
    case DType::f16: return detail::f16_to_f32(detail::f32_to_f16(value));
    case DType::bf16: return detail::bf16_to_f32(detail::f32_to_bf16(value));
    default: return value;
  }
}

// ---- Host tensors -----------------------------------------------------------------------------

const char* to_string(Layout layout) {
  switch (layout) {
    case Layout::bshd: return "bshd";
    case Layout::bhsd: return "bhsd";
    case Layout::padded: return "padded";
    case Layout::padded_bshd: return "padded_bshd";
  }
  return "unknown";
}

HostTensor::HostTensor(DType dtype, std::vector<std::int64_t> shape,
                       std::vector<std::int64_t> strides)
    : dtype_(dtype), shape_(std::move(shape)), strides_(std::move(strides)) {
  std::int64_t numel = 1, span = 1;
  for (std::size_t d = 0; d < shape_.size(); ++d) {
    numel *= shape_[d];
    if (shape_[d] > 0) span += (shape_[d] - 1) * strides_[d];
  }
  if (numel == 0) span = 1;  // keep a valid data pointer for empty tensors
  offsets_.resize(static_cast<std::size_t>(numel));
  is_logical_.assign(static_cast<std::size_t>(span), false);
  bytes_.assign(static_cast<std::size_t>(span) * size_of(dtype_), 0);
  std::vector<std::int64_t> index(shape_.size(), 0);
  for (std::int64_t n = 0; n < numel; ++n) {
    std::int64_t offset = 0;
    for (std::size_t d = 0; d < shape_.size(); ++d) offset += index[d] * strides_[d];
    offsets_[static_cast<std::size_t>(n)] = offset;
    is_logical_[static_cast<std::size_t>(offset)] = true;
    for (std::size_t d = shape_.size(); d-- > 0;) {
      if (++index[d] < shape_[d]) break;
      index[d] = 0;
    }
  }
  fill_padding();
}

HostTensor HostTensor::contiguous(DType dtype, std::vector<std::int64_t> shape) {
  std::vector<std::int64_t> strides(shape.size(), 1);
  for (std::size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
  return HostTensor(dtype, std::move(shape), std::move(strides));
}

HostTensor HostTensor::operand(DType dtype, std::int64_t B, std::int64_t L, std::int64_t H,
                               std::int64_t D, Layout layout) {
  switch (layout) {
    case Layout::bshd: return contiguous(dtype, {B, L, H, D});
    case Layout::bhsd: return HostTensor(dtype, {B, L, H, D}, {H * L * D, D, L * D, 1});
    case Layout::padded: {
      const std::int64_t row = D + 3, head = L * row + 5, batch = H * head + 7;
      return HostTensor(dtype, {B, L, H, D}, {batch, row, head, 1});
    }
    case Layout::padded_bshd: {
      const std::int64_t head = D + 2, row = H * head + 3, batch = L * row + 5;
      return HostTensor(dtype, {B, L, H, D}, {batch, row, head, 1});
    }
  }
  return {};
}

HostTensor HostTensor::lse(std::int64_t B, std::int64_t H, std::int64_t L, Layout layout) {
  if (layout != Layout::padded && layout != Layout::padded_bshd)
    return contiguous(DType::f32, {B, H, L});
  const std::int64_t head = 2 * L + 1, batch = H * head + 3;
  return HostTensor(DType::f32, {B, H, L}, {batch, head, 2});
}

Tensor HostTensor::view() const {
  Tensor t;
  t.data = const_cast<std::uint8_t*>(bytes_.data());
  t.dtype = dtype_;
  t.rank = static_cast<int>(shape_.size());
  for (int d = 0; d < t.rank; ++d) {
    t.shape[d] = shape_[static_cast<std::size_t>(d)];
    t.stride[d] = strides_[static_cast<std::size_t>(d)];
  }
  return t;
}

float HostTensor::get(std::int64_t logical) const {
  return load_element(bytes_.data(), dtype_, offsets_[static_cast<std::size_t>(logical)]);
}

void HostTensor::set(std::int64_t logical, float value) {
  store_element(bytes_.data(), dtype_, offsets_[static_cast<std::size_t>(logical)], value);
}

std::vector<float> HostTensor::to_f32() const {
  std::vector<float> out(offsets_.size());
  for (std::size_t n = 0; n < offsets_.size(); ++n)
    out[n] = load_element(bytes_.data(), dtype_, offsets_[n]);
  return out;
}

void HostTensor::fill_normal(Rng& rng, float stddev) {
  std::normal_distribution<float> normal(0.0f, stddev);
  for (std::int64_t n = 0; n < numel(); ++n) set(n, normal(rng));
  fill_padding();
}

void HostTensor::fill(float value) {
  for (std::int64_t n = 0; n < numel(); ++n) set(n, value);
  fill_padding();
}

void HostTensor::poison() {
  for (const std::int64_t offset : offsets_) store_pattern(bytes_.data(), dtype_, offset, false);
  fill_padding();
}

void HostTensor::fill_padding() {
  for (std::size_t e = 0; e < is_logical_.size(); ++e)
    if (!is_logical_[e]) store_pattern(bytes_.data(), dtype_, static_cast<std::int64_t>(e), true);
}

bool HostTensor::padding_intact() const {
  for (std::size_t e = 0; e < is_logical_.size(); ++e)
    if (!is_logical_[e] && !holds_canary(bytes_.data(), dtype_, static_cast<std::int64_t>(e)))
      return false;
  return true;
}

std::int64_t HostTensor::count_nan() const {
  std::int64_t n = 0;
  for (const std::int64_t offset : offsets_)
    if (std::isnan(load_element(bytes_.data(), dtype_, offset))) ++n;
  return n;
}

// ---- Error measures ---------------------------------------------------------------------------

std::string ErrorStats::str() const {
  std::ostringstream os;
  os << "rel_l2 " << rel_l2 << ", max_abs " << max_abs << " (at logical index " << worst
     << "), max|ref| " << ref_max << ", non-finite " << nonfinite;
  return os.str();
}

ErrorStats compare(const std::vector<float>& got, const std::vector<float>& ref) {
  ErrorStats s;
  double err2 = 0.0, ref2 = 0.0;
  for (std::size_t n = 0; n < ref.size() && n < got.size(); ++n) {
    const double r = ref[n], g = got[n];
    ref2 += r * r;
    s.ref_max = std::max(s.ref_max, std::abs(r));
    if (!std::isfinite(g)) {
      if (s.nonfinite++ == 0 && s.max_abs == 0.0) s.worst = static_cast<std::int64_t>(n);
      continue;
    }
    const double e = std::abs(g - r);
    err2 += e * e;
    if (e > s.max_abs) {
      s.max_abs = e;
      s.worst = static_cast<std::int64_t>(n);
    }
  }
  if (got.size() != ref.size())
    s.nonfinite += static_cast<std::int64_t>(std::max(got.size(), ref.size()) -
                                             std::min(got.size(), ref.size()));
  s.rel_l2 = ref2 > 0.0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  return s;
}

std::string LseStats::str() const {
  std::ostringstream os;
  os << "lse max_abs " << max_abs << ", mismatched -inf/non-finite " << mismatched_inf
     << " (worst at " << worst << ")";
  return os.str();
}

LseStats compare_lse(const std::vector<float>& got, const std::vector<float>& ref) {
  LseStats s;
  constexpr float neg_inf = -std::numeric_limits<float>::infinity();
  for (std::size_t n = 0; n < ref.size() && n < got.size(); ++n) {
    const bool ref_masked = ref[n] == neg_inf, got_masked = got[n] == neg_inf;
    if (ref_masked || got_masked || !std::isfinite(got[n])) {
      if (!(ref_masked && got_masked)) {
        if (s.mismatched_inf++ == 0) s.worst = static_cast<std::int64_t>(n);
      }
      continue;
    }
    const double e = std::abs(static_cast<double>(got[n]) - ref[n]);
    if (e > s.max_abs) {
      s.max_abs = e;
      if (s.mismatched_inf == 0) s.worst = static_cast<std::int64_t>(n);
    }
  }
  if (got.size() != ref.size()) ++s.mismatched_inf;
  return s;
}

// ---- Naive same-precision attention -----------------------------------------------------------

namespace {

// The modified score of (i, j), or -inf where the key is not visible to the row.
float masked_score(const detail::AttnParams& p, std::int64_t b, std::int64_t h, std::int64_t i,
                   std::int64_t j, float dot) {
  return detail::key_visible(p, b, h, i, j) ? detail::modified_score<float>(p, b, h, i, j, dot)
                                            : -std::numeric_limits<float>::infinity();
}

// 0 for a dropped element, 1 / (1 - p) for a kept one, 1 without dropout.
float dropout_factor(const detail::AttnParams& p, std::int64_t b, std::int64_t h, std::int64_t i,
                     std::int64_t j) {
  if (!p.has_dropout()) return 1.0f;
  return detail::dropout_keeps(p.dropout, b, h, i, j) ? p.dropout.keep_scale : 0.0f;
}

// One head's operands as f32 (the storage values).
struct NaiveHead {
  std::vector<float> q, k, v;
};
NaiveHead naive_head(const detail::AttnParams& p, std::int64_t b, std::int64_t h) {
  const std::int64_t Lq = p.len_q, Lk = p.len_k, D = p.dim, Dv = p.dim_v;
  const std::int64_t hk = h / p.heads_per_kv;
  NaiveHead r{std::vector<float>(static_cast<std::size_t>(Lq * D)),
              std::vector<float>(static_cast<std::size_t>(Lk * D)),
              std::vector<float>(static_cast<std::size_t>(Lk * Dv))};
  for (std::int64_t i = 0; i < Lq; ++i)
    for (std::int64_t d = 0; d < D; ++d)
      r.q[i * D + d] = detail::load_as_f32(
          p.q, p.dtype, b * p.q_stride_b + i * p.q_stride_l + h * p.q_stride_h + d);
  for (std::int64_t j = 0; j < Lk; ++j) {
    for (std::int64_t d = 0; d < D; ++d)
      r.k[j * D + d] = detail::load_as_f32(
          p.k, p.dtype, b * p.k_stride_b + j * p.k_stride_l + hk * p.k_stride_h + d);
    for (std::int64_t d = 0; d < Dv; ++d)
      r.v[j * Dv + d] = detail::load_as_f32(
          p.v, p.dtype, b * p.v_stride_b + j * p.v_stride_l + hk * p.v_stride_h + d);
  }
  return r;
}

}  // namespace

NaiveGradients naive_attention_backward(const AttentionBackwardArgs& args,
                                        NaiveDelta delta_source) {
  const detail::AttnBackwardParams p = detail::validate_backward(args);
  const std::int64_t B = p.batch, Lq = p.len_q, Lk = p.len_k, Hq = p.heads_q, Hkv = p.heads_kv,
                     D = p.dim, Dv = p.dim_v;
  const DType st = p.dtype;
  NaiveGradients r;
  r.dq.assign(static_cast<std::size_t>(B * Lq * Hq * D), 0.0f);
  r.dk.assign(static_cast<std::size_t>(B * Lk * Hkv * D), 0.0f);
  r.dv.assign(static_cast<std::size_t>(B * Lk * Hkv * Dv), 0.0f);
  std::vector<float> prob(static_cast<std::size_t>(Lk)), dprob(prob.size()), dscore(prob.size()),
      dout(static_cast<std::size_t>(Dv));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < Hq; ++h) {
      const std::int64_t hk = h / p.heads_per_kv;
      const NaiveHead x = naive_head(p, b, h);
      for (std::int64_t i = 0; i < Lq; ++i) {
        for (std::int64_t d = 0; d < Dv; ++d)
          dout[d] = round_to(st, detail::load_as_f32(p.dout, p.dout_dtype,
                                                     b * p.do_stride_b + i * p.do_stride_l +
                                                         h * p.do_stride_h + d));
        // The forward's probabilities (rounded as in naive_attention) and the score derivative.
        float row_max = -std::numeric_limits<float>::infinity();
        for (std::int64_t j = 0; j < Lk; ++j) {
          float dot = 0.0f;
          for (std::int64_t d = 0; d < D; ++d) dot += x.q[i * D + d] * x.k[j * D + d];
          dot = round_to(st, dot);
          prob[j] = round_to(st, masked_score(p, b, h, i, j, dot));
          row_max = std::max(row_max, prob[j]);
          const float t = p.softcap > 0.0f ? std::tanh(p.scale * dot / p.softcap) : 0.0f;
          dscore[j] = p.scale * (1.0f - t * t);
        }
        if (row_max == -std::numeric_limits<float>::infinity()) continue;  // fully masked
        float sum = 0.0f;
        for (std::int64_t j = 0; j < Lk; ++j) {
          prob[j] = std::exp(prob[j] - row_max);
          sum += prob[j];
        }
        float delta = 0.0f, delta_from_out = 0.0f;
        if (delta_source == NaiveDelta::given_out) {
          for (std::int64_t d = 0; d < Dv; ++d)
            delta_from_out += dout[d] * detail::load_as_f32(p.out, p.out_dtype,
                                                            b * p.o_stride_b + i * p.o_stride_l +
                                                                h * p.o_stride_h + d);
          delta_from_out = round_to(st, delta_from_out);
        }
        for (std::int64_t j = 0; j < Lk; ++j) {
          prob[j] = round_to(st, prob[j] / sum);
          const float keep = dropout_factor(p, b, h, i, j);
          float dot = 0.0f;
          for (std::int64_t d = 0; d < Dv; ++d) dot += dout[d] * x.v[j * Dv + d];
          dprob[j] = round_to(st, round_to(st, dot) * keep);
          delta += prob[j] * dprob[j];
          float* dv = &r.dv[static_cast<std::size_t>(((b * Lk + j) * Hkv + hk) * Dv)];
          const float kept = round_to(st, prob[j] * keep);
          for (std::int64_t d = 0; d < Dv; ++d) dv[d] += kept * dout[d];
        }
        if (delta_source == NaiveDelta::given_out) delta = delta_from_out;
        float* dq = &r.dq[static_cast<std::size_t>(((b * Lq + i) * Hq + h) * D)];
        for (std::int64_t j = 0; j < Lk; ++j) {
          const float g = round_to(st, prob[j] * (dprob[j] - delta) * dscore[j]);
          float* dk = &r.dk[static_cast<std::size_t>(((b * Lk + j) * Hkv + hk) * D)];
          for (std::int64_t d = 0; d < D; ++d) {
            dq[d] += g * x.k[j * D + d];
            dk[d] += g * x.q[i * D + d];
          }
        }
      }
    }
  for (float& x : r.dq) x = round_to(p.dq_dtype, round_to(st, x));
  for (float& x : r.dk) x = round_to(p.dk_dtype, round_to(st, x));
  for (float& x : r.dv) x = round_to(p.dv_dtype, round_to(st, x));
  return r;
}

NaiveResult naive_attention(const AttentionArgs& args) {
  const detail::AttnParams p = detail::validate_forward(args);
  const std::int64_t B = p.batch, Lq = p.len_q, Lk = p.len_k, Hq = p.heads_q, D = p.dim,
                     Dv = p.dim_v;
  const DType st = p.dtype;
  NaiveResult r;
  r.out.assign(static_cast<std::size_t>(B * Lq * Hq * Dv), 0.0f);
  r.lse.assign(static_cast<std::size_t>(B * Hq * Lq), -std::numeric_limits<float>::infinity());
  std::vector<float> q(static_cast<std::size_t>(Lq * D)), k(static_cast<std::size_t>(Lk * D)),
      v(static_cast<std::size_t>(Lk * Dv)), s(static_cast<std::size_t>(Lk)),
      acc(static_cast<std::size_t>(Dv));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < Hq; ++h) {
      const std::int64_t hk = h / p.heads_per_kv;
      for (std::int64_t i = 0; i < Lq; ++i)
        for (std::int64_t d = 0; d < D; ++d)
          q[i * D + d] = detail::load_as_f32(
              p.q, st, b * p.q_stride_b + i * p.q_stride_l + h * p.q_stride_h + d);
      for (std::int64_t j = 0; j < Lk; ++j) {
        for (std::int64_t d = 0; d < D; ++d)
          k[j * D + d] = detail::load_as_f32(
              p.k, st, b * p.k_stride_b + j * p.k_stride_l + hk * p.k_stride_h + d);
        for (std::int64_t d = 0; d < Dv; ++d)
          v[j * Dv + d] = detail::load_as_f32(
              p.v, st, b * p.v_stride_b + j * p.v_stride_l + hk * p.v_stride_h + d);
      }
      for (std::int64_t i = 0; i < Lq; ++i) {
        float row_max = -std::numeric_limits<float>::infinity();
        for (std::int64_t j = 0; j < Lk; ++j) {
          float dot = 0.0f;
          for (std::int64_t d = 0; d < D; ++d) dot += q[i * D + d] * k[j * D + d];
          const float score = round_to(st, masked_score(p, b, h, i, j, round_to(st, dot)));
          s[j] = score;
          row_max = std::max(row_max, score);
        }
        float* out = &r.out[static_cast<std::size_t>(((b * Lq + i) * Hq + h) * Dv)];
        if (row_max == -std::numeric_limits<float>::infinity()) continue;  // fully masked
        float sum = 0.0f;
        for (std::int64_t j = 0; j < Lk; ++j) {
          s[j] = std::exp(s[j] - row_max);
          sum += s[j];
        }
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (std::int64_t j = 0; j < Lk; ++j) {
          const float prob = round_to(st, s[j] / sum) * dropout_factor(p, b, h, i, j);
          for (std::int64_t d = 0; d < Dv; ++d) acc[d] += prob * v[j * Dv + d];
        }
        for (std::int64_t d = 0; d < Dv; ++d) out[d] = round_to(p.out_dtype, round_to(st, acc[d]));
        r.lse[static_cast<std::size_t>((b * Hq + h) * Lq + i)] = row_max + std::log(sum);
      }
    }
  return r;
}

void expect_argument_error(const std::function<void()>& call, const std::string& argument,
                           const std::string& fragment) {
  try {
    call();
    ADD_FAILURE() << "no tileattn::Error thrown; expected one naming '" << argument << "'";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'" + argument + "'"), std::string::npos)
        << "message does not name '" << argument << "': " << message;
    EXPECT_NE(message.find(fragment), std::string::npos)
        << "message lacks \"" << fragment << "\": " << message;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-tileattn exception: " << e.what();
  }
}

std::string describe(const AttentionArgs& a) {
  std::ostringstream os;
  auto shape = [&](const char* name, const Tensor& t) {
    if (!t.present()) return;
    os << name << " " << to_string(t.dtype) << " [";
    for (int d = 0; d < t.rank; ++d) os << (d ? "," : "") << t.shape[d];
    os << "] strides [";
    for (int d = 0; d < t.rank; ++d) os << (d ? "," : "") << t.stride[d];
    os << "]; ";
  };
  shape("q", a.q);
  shape("k", a.k);
  shape("v", a.v);
  shape("out", a.out);
  shape("lse", a.lse);
  shape("mask", a.mask);
  shape("key_lengths", a.key_lengths);
  shape("alibi_slopes", a.alibi_slopes);
  os << "scale " << (a.scale ? std::to_string(*a.scale) : std::string("default")) << ", causal "
     << a.causal << " (" << (a.alignment == Alignment::bottom_right ? "bottom_right" : "top_left")
     << "), window (" << a.window_left << ", " << a.window_right << "), softcap " << a.softcap
     << ", dropout " << a.dropout_p << " (seed " << a.dropout_seed << ", offset "
     << a.dropout_offset << ")";
  return os.str();
}

}  // namespace tileattn::test
