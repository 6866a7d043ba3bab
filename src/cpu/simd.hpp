// A minimal f32 vector type for the CPU kernels: the same operations over AVX-512 (16 lanes),
// AVX2+FMA (8 lanes) or plain arrays (8 lanes, left to the compiler's auto-vectoriser).
// Include only from an ISA translation unit, with TILEATTN_ISA_NAMESPACE defined: everything
// here has internal linkage so that code built for one ISA never leaks into another.
#pragma once

#include <cstdint>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace tileattn::detail::TILEATTN_ISA_NAMESPACE {
namespace {

#if defined(__AVX512F__)

struct VecF {
  static constexpr int lanes = 16;
  __m512 v;
};
inline VecF load(const float* p) {
  return {_mm512_loadu_ps(p)};
}
inline void store(float* p, VecF a) {
  _mm512_storeu_ps(p, a.v);
}
inline VecF splat(float x) {
  return {_mm512_set1_ps(x)};
}
inline VecF zero() {
  return {_mm512_setzero_ps()};
}
inline VecF fma(VecF a, VecF b, VecF c) {
  return {_mm512_fmadd_ps(a.v, b.v, c.v)};
}
inline VecF mul(VecF a, VecF b) {
  return {_mm512_mul_ps(a.v, b.v)};
}
inline VecF add(VecF a, VecF b) {
  return {_mm512_add_ps(a.v, b.v)};
}
inline VecF sub(VecF a, VecF b) {
  return {_mm512_sub_ps(a.v, b.v)};
}
inline VecF vmax(VecF a, VecF b) {
  return {_mm512_max_ps(a.v, b.v)};
}
inline VecF vmin(VecF a, VecF b) {
  return {_mm512_min_ps(a.v, b.v)};
}
inline VecF vabs(VecF a) {
  return {_mm512_abs_ps(a.v)};
}
inline VecF vround(VecF a) {
  return {_mm512_roundscale_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
}
// 2^n for integral-valued n in [-127, 127]; n = -127 gives exactly 0.
inline VecF pow2_int(VecF n) {
  const __m512i bits =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n.v), _mm512_set1_epi32(127)), 23);
  return {_mm512_castsi512_ps(bits)};
}
inline float reduce_max(VecF a) {
  return _mm512_reduce_max_ps(a.v);
}
inline float reduce_add(VecF a) {
  return _mm512_reduce_add_ps(a.v);
}
// Lanes where (first + lane) lies outside [lo, hi) become -inf.
inline VecF mask_outside(VecF a, std::int64_t first, std::int64_t lo, std::int64_t hi) {
  const __m512i idx =
      _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(first)),
                       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  const __mmask16 inside = _mm512_cmpge_epi32_mask(idx, _mm512_set1_epi32(static_cast<int>(lo))) &
                           _mm512_cmplt_epi32_mask(idx, _mm512_set1_epi32(static_cast<int>(hi)));
  return {_mm512_mask_blend_ps(inside, _mm512_set1_ps(-__builtin_inff()), a.v)};
}
// Lane offsets 0, 1, 2, ... as floats.
inline VecF lane_index() {
  return {_mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)};
}

// Lanes of `a` greater than the lanes of `b` take `x`, the others `y`.
inline VecF select_greater(VecF a, VecF b, VecF x, VecF y) {
  return {_mm512_mask_blend_ps(_mm512_cmp_ps_mask(a.v, b.v, _CMP_GT_OQ), y.v, x.v)};
}
// Whether any lane of `a` is greater than that of `b`.
inline bool any_greater(VecF a, VecF b) {
  return _mm512_cmp_ps_mask(a.v, b.v, _CMP_GT_OQ) != 0;
}
// The first n (< lanes) floats at p, the other lanes `fill`; and the first n lanes stored to p.
inline VecF load_first(const float* p, int n, float fill) {
  return {_mm512_mask_loadu_ps(_mm512_set1_ps(fill), static_cast<__mmask16>((1u << n) - 1), p)};
}
inline void store_first(float* p, int n, VecF a) {
  _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), a.v);
}
// Reduces 16 rows at once: lane i of the result is op over the lanes of v[i]. A transposing
// tree of 45 instructions instead of 16 separate horizontal reductions (and no long chains).
template <typename Op>
inline VecF reduce_rows(const VecF* v, Op op) {
  // The tree leaves lane 4k + j holding input slot 4j + k, so slot 4j + k takes row 4k + j.
  auto row = [&](int slot) { return v[4 * (slot % 4) + slot / 4].v; };
  auto f = [&](__m512 a, __m512 b) { return op(VecF{a}, VecF{b}).v; };
  __m512 w[8];  // w[i]: slot 2i folded to quarters 0-1, slot 2i+1 to quarters 2-3
  for (int i = 0; i < 8; ++i) {
    const __m512 a = row(2 * i), b = row(2 * i + 1);
    w[i] = f(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
  }
  __m512 u[4];  // u[j]: quarter k holds four partials of slot 4j + k
  for (int j = 0; j < 4; ++j)
    u[j] = f(_mm512_shuffle_f32x4(w[2 * j], w[2 * j + 1], 0x88),
             _mm512_shuffle_f32x4(w[2 * j], w[2 * j + 1], 0xDD));
  const __m512 s01 = f(_mm512_unpacklo_ps(u[0], u[1]), _mm512_unpackhi_ps(u[0], u[1]));
  const __m512 s23 = f(_mm512_unpacklo_ps(u[2], u[3]), _mm512_unpackhi_ps(u[2], u[3]));
  return {f(_mm512_shuffle_ps(s01, s23, 0x44), _mm512_shuffle_ps(s01, s23, 0xEE))};
}
// 2^x for x <= 0 (softmax arguments), split as 2^x = 2^(k / 16) * 2^f with k = round(16 x) and
// f = x - k / 16 in [-1/32, 1/32]: adding 1.5 * 2^19 rounds x to a multiple of 1/16 and leaves
// k mod 16 in the low mantissa bits, which pick 2^(j / 16) from a 16-entry table (vpermps);
// a cubic gives 2^f (Taylor, truncation < 1e-8) and vscalefps multiplies by 2^floor(k / 16).
// Relative error <= 1.2e-7 on [-126, 0] (the other ISAs' degree-6 polynomial: 2.2e-7), with
// four FMA-pipe operations instead of eight. Exactly 1 at 0; exact 0 below -126 and for -inf (the
// zero-masked scalef), so no result is subnormal (no FP assists in P V); NaN stays NaN.
inline VecF exp2_nonpositive(VecF x) {
  const __mmask16 normal = _mm512_cmp_ps_mask(x.v, _mm512_set1_ps(-126.0f), _CMP_NLT_UQ);
  const __m512 shifter = _mm512_set1_ps(786432.0f);  // 1.5 * 2^19: its ulp is 1/16
  const __m512 shifted = _mm512_add_ps(x.v, shifter);
  const __m512 k16 = _mm512_sub_ps(shifted, shifter);  // k / 16, exact
  const __m512 f = _mm512_sub_ps(x.v, k16);            // exact
  const __m512 table = _mm512_setr_ps(
      1.0f, 1.0442737340927124f, 1.0905077457427979f, 1.1387885808944702f, 1.1892070770263672f,
      1.2418577671051025f, 1.2968395948410034f, 1.3542555570602417f, 1.4142135381698608f,
      1.4768261909484863f, 1.5422108173370361f, 1.610490322113037f, 1.6817928552627563f,
      1.7562521696090698f, 1.8340080976486206f, 1.9152065515518188f);  // 2^(j / 16), rounded
  const __m512 t = _mm512_permutexvar_ps(_mm512_castps_si512(shifted), table);
  __m512 p = _mm512_set1_ps(5.5504108664821580e-2f);                  // ln(2)^3 / 6
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650695910071e-1f));  // ln(2)^2 / 2
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718055994531e-1f));  // ln(2)
  p = _mm512_mul_ps(p, f);                                            // 2^f - 1
  return {_mm512_maskz_scalef_ps(normal, _mm512_fmadd_ps(t, p, t), k16)};
}

#elif defined(__AVX2__)

struct VecF {
  static constexpr int lanes = 8;
  __m256 v;
};
inline VecF load(const float* p) {
  return {_mm256_loadu_ps(p)};
}
inline void store(float* p, VecF a) {
  _mm256_storeu_ps(p, a.v);
}
inline VecF splat(float x) {
  return {_mm256_set1_ps(x)};
}
inline VecF zero() {
  return {_mm256_setzero_ps()};
}
inline VecF fma(VecF a, VecF b, VecF c) {
  return {_mm256_fmadd_ps(a.v, b.v, c.v)};
}
inline VecF mul(VecF a, VecF b) {
  return {_mm256_mul_ps(a.v, b.v)};
}
inline VecF add(VecF a, VecF b) {
  return {_mm256_add_ps(a.v, b.v)};
}
inline VecF sub(VecF a, VecF b) {
  return {_mm256_sub_ps(a.v, b.v)};
}
inline VecF vmax(VecF a, VecF b) {
  return {_mm256_max_ps(a.v, b.v)};
}
inline VecF vmin(VecF a, VecF b) {
  return {_mm256_min_ps(a.v, b.v)};
}
inline VecF vabs(VecF a) {
  return {_mm256_andnot_ps(_mm256_set1_ps(-0.0f), a.v)};
}
inline VecF vround(VecF a) {
  return {_mm256_round_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
}
inline VecF pow2_int(VecF n) {
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n.v), _mm256_set1_epi32(127)), 23);
  return {_mm256_castsi256_ps(bits)};
}
inline float reduce_max(VecF a) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}
inline float reduce_add(VecF a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}
inline VecF mask_outside(VecF a, std::int64_t first, std::int64_t lo, std::int64_t hi) {
  const __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(first)),
                                       _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256i below = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(lo)), idx);
  const __m256i at_or_above = _mm256_cmpgt_epi32(idx, _mm256_set1_epi32(static_cast<int>(hi) - 1));
  const __m256 outside = _mm256_castsi256_ps(_mm256_or_si256(below, at_or_above));
  return {_mm256_blendv_ps(a.v, _mm256_set1_ps(-__builtin_inff()), outside)};
}
inline VecF lane_index() {
  return {_mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7)};
}
inline VecF select_greater(VecF a, VecF b, VecF x, VecF y) {
  return {_mm256_blendv_ps(y.v, x.v, _mm256_cmp_ps(a.v, b.v, _CMP_GT_OQ))};
}
inline bool any_greater(VecF a, VecF b) {
  return _mm256_movemask_ps(_mm256_cmp_ps(a.v, b.v, _CMP_GT_OQ)) != 0;
}
inline __m256i first_lanes(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline VecF load_first(const float* p, int n, float fill) {
  const __m256i m = first_lanes(n);
  return {_mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m))};
}
inline void store_first(float* p, int n, VecF a) {
  _mm256_maskstore_ps(p, first_lanes(n), a.v);
}
// Reduces 8 rows at once: lane i of the result is op over the lanes of v[i].
template <typename Op>
inline VecF reduce_rows(const VecF* v, Op op) {
  // The tree leaves lane 4h + i holding input slot 2i + h, so slot 2i + h takes row 4h + i.
  auto row = [&](int slot) { return v[4 * (slot % 2) + slot / 2].v; };
  auto f = [&](__m256 a, __m256 b) { return op(VecF{a}, VecF{b}).v; };
  __m256 w[4];  // w[i]: slot 2i folded into the low half, slot 2i+1 into the high half
  for (int i = 0; i < 4; ++i) {
    const __m256 a = row(2 * i), b = row(2 * i + 1);
    w[i] = f(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
  }
  const __m256 s01 = f(_mm256_unpacklo_ps(w[0], w[1]), _mm256_unpackhi_ps(w[0], w[1]));
  const __m256 s23 = f(_mm256_unpacklo_ps(w[2], w[3]), _mm256_unpackhi_ps(w[2], w[3]));
  return {f(_mm256_shuffle_ps(s01, s23, 0x44), _mm256_shuffle_ps(s01, s23, 0xEE))};
}

#else  // portable: plain arrays, vectorised by the compiler for the baseline target

struct VecF {
  static constexpr int lanes = 8;
  float v[8];
};
inline VecF load(const float* p) {
  VecF r;
  for (int i = 0; i < 8; ++i) r.v[i] = p[i];
  return r;
}
inline void store(float* p, VecF a) {
  for (int i = 0; i < 8; ++i) p[i] = a.v[i];
}
inline VecF splat(float x) {
  VecF r;
  for (int i = 0; i < 8; ++i) r.v[i] = x;
  return r;
}
inline VecF zero() {
  return splat(0.0f);
}
#define TILEATTN_LANEWISE(name, expr)     \
  inline VecF name(VecF a, VecF b) {      \
    VecF r;                               \
    for (int i = 0; i < 8; ++i) {         \
      const float x = a.v[i], y = b.v[i]; \
      r.v[i] = (expr);                    \
    }                                     \
    return r;                             \
  }
TILEATTN_LANEWISE(mul, x* y)
TILEATTN_LANEWISE(add, x + y)
TILEATTN_LANEWISE(sub, x - y)
TILEATTN_LANEWISE(vmax, x > y ? x : y)
TILEATTN_LANEWISE(vmin, x < y ? x : y)
#undef TILEATTN_LANEWISE
inline VecF fma(VecF a, VecF b, VecF c) {
  VecF r;
  for (int i = 0; i < 8; ++i) r.v[i] = a.v[i] * b.v[i] + c.v[i];
  return r;
}
inline VecF vabs(VecF a) {
  VecF r;
  for (int i = 0; i < 8; ++i) r.v[i] = __builtin_fabsf(a.v[i]);
  return r;
}
inline VecF vround(VecF a) {
  VecF r;
  for (int i = 0; i < 8; ++i) r.v[i] = __builtin_nearbyintf(a.v[i]);
  return r;
}
inline VecF pow2_int(VecF n) {
  VecF r;
  for (int i = 0; i < 8; ++i) {
    // A NaN n (from a NaN score) converts as 0: the polynomial factor carries the NaN. n > 0
    // only reaches here in a row that a NaN score poisons (the NaN can hide the row's maximum
    // from vmax), so it saturates at 2^128 (the bits of +inf) instead of overflowing the cast.
    const float c = n.v[i] < 128.0f ? n.v[i] : 128.0f;
    const std::int32_t e = c == c ? static_cast<std::int32_t>(c) : 0;
    const std::uint32_t bits = static_cast<std::uint32_t>(e + 127) << 23;
    __builtin_memcpy(&r.v[i], &bits, sizeof bits);
  }
  return r;
}
inline float reduce_max(VecF a) {
  float m = a.v[0];
  for (int i = 1; i < 8; ++i) m = a.v[i] > m ? a.v[i] : m;
  return m;
}
inline float reduce_add(VecF a) {
  float s = 0.0f;
  for (int i = 0; i < 8; ++i) s += a.v[i];
  return s;
}
inline VecF mask_outside(VecF a, std::int64_t first, std::int64_t lo, std::int64_t hi) {
  VecF r;
  for (int i = 0; i < 8; ++i) {
    const std::int64_t j = first + i;
    r.v[i] = (j >= lo && j < hi) ? a.v[i] : -__builtin_inff();
  }
  return r;
}
inline VecF lane_index() {
  VecF r;
  for (int i = 0; i < 8; ++i) r.v[i] = static_cast<float>(i);
  return r;
}

inline VecF select_greater(VecF a, VecF b, VecF x, VecF y) {
  VecF r;
  for (int i = 0; i < 8; ++i) r.v[i] = a.v[i] > b.v[i] ? x.v[i] : y.v[i];
  return r;
}
inline bool any_greater(VecF a, VecF b) {
  bool any = false;
  for (int i = 0; i < 8; ++i) any |= a.v[i] > b.v[i];
  return any;
}
inline VecF load_first(const float* p, int n, float fill) {
  VecF r;
  for (int i = 0; i < 8; ++i) r.v[i] = i < n ? p[i] : fill;
  return r;
}
inline void store_first(float* p, int n, VecF a) {
  for (int i = 0; i < n; ++i) p[i] = a.v[i];
}
// Reduces 8 rows at once: lane i of the result is op over the lanes of v[i] (a transpose,
// then op across the transposed vectors).
template <typename Op>
inline VecF reduce_rows(const VecF* v, Op op) {
  VecF t[8];
  for (int j = 0; j < 8; ++j)
    for (int i = 0; i < 8; ++i) t[j].v[i] = v[i].v[j];
  VecF r = t[0];
  for (int j = 1; j < 8; ++j) r = op(r, t[j]);
  return r;
}

#endif

// Lane i of the result is the maximum (sum) over the lanes of v[i], for kLanes rows v[0..).
inline VecF reduce_rows_max(const VecF* v) {
  return reduce_rows(v, [](VecF a, VecF b) { return vmax(a, b); });
}
inline VecF reduce_rows_add(const VecF* v) {
  return reduce_rows(v, [](VecF a, VecF b) { return add(a, b); });
}

#if !defined(__AVX512F__)
// 2^x for x <= 0 (softmax arguments): Taylor/minimax polynomial on the fraction, exact 0 for
// x <= -127 and for -inf. Relative error about 2e-7.
inline VecF exp2_nonpositive(VecF x) {
  // The clamp keeps a NaN (the max returns its second operand when either is NaN), so that a
  // NaN score gives a NaN probability and its row is caught at the tile's end.
  x = vmax(splat(-127.0f), x);
  const VecF n = vround(x);
  const VecF f = sub(x, n);  // [-0.5, 0.5]
  VecF p = splat(1.5403530e-4f);
  p = fma(p, f, splat(1.3333558e-3f));
  p = fma(p, f, splat(9.6181291e-3f));
  p = fma(p, f, splat(5.5504109e-2f));
  p = fma(p, f, splat(2.4022651e-1f));
  p = fma(p, f, splat(6.9314718e-1f));
  p = fma(p, f, splat(1.0f));
  return mul(p, pow2_int(n));
}
#endif

// c * tanh(x / c). For |x / c| >= 0.5 it is c * sign(x) * (1 - e) / (1 + e) with
// e = exp(-2|x|/c), where 1 - e >= 0.63 keeps full relative precision. Below that, 1 - e
// cancels (a cap of 1e5 on scores near 1 would keep only a few bits), so the small side uses
// the odd Taylor series x * P((x/c)^2), whose terms shrink tenfold each (radius pi/2): nine
// terms leave a relative error under 1e-8 at 0.5.
inline VecF softcap(VecF x, float cap, float two_log2e_over_cap) {
  const VecF y = mul(x, splat(1.0f / cap));
  const VecF y2 = mul(y, y);
  VecF p = splat(6404582.0f / 10854718875.0f);
  p = fma(p, y2, splat(-929569.0f / 638512875.0f));
  p = fma(p, y2, splat(21844.0f / 6081075.0f));
  p = fma(p, y2, splat(-1382.0f / 155925.0f));
  p = fma(p, y2, splat(62.0f / 2835.0f));
  p = fma(p, y2, splat(-17.0f / 315.0f));
  p = fma(p, y2, splat(2.0f / 15.0f));
  p = fma(p, y2, splat(-1.0f / 3.0f));
  p = fma(p, y2, splat(1.0f));
  const VecF small = mul(x, p);
  // Scores well inside the cap (the usual case: caps of 30-50 on scores of a few units) need
  // only the series.
  const VecF abs_y = vabs(y), half = splat(0.5f);
  if (!any_greater(abs_y, half)) return small;

  const VecF e = exp2_nonpositive(mul(vabs(x), splat(-two_log2e_over_cap)));
  const VecF one = splat(1.0f);
  VecF t = mul(sub(one, e), splat(cap));
  // divide: (1 - e) / (1 + e); 1 + e is in [1, 2], so a plain division is well-conditioned.
  VecF denom = add(one, e);
  VecF r;
#if defined(__AVX512F__)
  r.v = _mm512_div_ps(t.v, denom.v);
  r.v = _mm512_castsi512_ps(
      _mm512_or_si512(_mm512_castps_si512(r.v),
                      _mm512_and_si512(_mm512_castps_si512(x.v), _mm512_set1_epi32(INT32_MIN))));
#elif defined(__AVX2__)
  r.v = _mm256_div_ps(t.v, denom.v);
  r.v = _mm256_or_ps(r.v, _mm256_and_ps(x.v, _mm256_set1_ps(-0.0f)));
#else
  for (int i = 0; i < 8; ++i) r.v[i] = x.v[i] < 0.0f ? -t.v[i] / denom.v[i] : t.v[i] / denom.v[i];
#endif
  // A NaN y compares false and takes the series side, which keeps it NaN.
  return select_greater(abs_y, half, r, small);
}

}  // namespace
}  // namespace tileattn::detail::TILEATTN_ISA_NAMESPACE
