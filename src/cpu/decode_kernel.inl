// The compute kernel of attention over a KV cache (decode_kernels.hpp): for one kv head and a
// range of keys, all the head group's query rows at once. Per key block:
//   1. scores: each K row is loaded once (converted to f32 in registers) and dotted with every
//      row; the dot products of up to `lanes` (row, key) pairs are reduced together by a
//      transposing tree (reduce_rows), so no per-dot horizontal sum is paid;
//   2. the score pipeline and an online softmax per row, in log2 units;
//   3. out += P V, each V row loaded once per group of four rows and four vectors.
// The cache is read where it lies: no per-call repack.
//
// Compiled once per ISA (decode_*.cpp) with TILEATTN_ISA_NAMESPACE and TILEATTN_DECODE_GETTER
// set by the including file.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cpu/decode_kernels.hpp"
#include "cpu/simd.hpp"

namespace tileattn::detail::TILEATTN_ISA_NAMESPACE {
namespace {

constexpr int kLanes = VecF::lanes;
constexpr int kBlock = kDecodeBlock;
#ifndef TILEATTN_PF_BLOCKS
#define TILEATTN_PF_BLOCKS 8
#endif
constexpr int kPrefetchBlocks = TILEATTN_PF_BLOCKS;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kFltMax = 3.40282347e38f;
static_assert(kBlock % kLanes == 0, "a key block holds whole vectors");

struct F16 {
  std::uint16_t bits;
};
struct BF16 {
  std::uint16_t bits;
};

// lanes elements of storage T at p, as f32.
inline VecF load_row(const float* p) {
  return load(p);
}
#if defined(__AVX512F__)
inline VecF load_row(const F16* p) {
  return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
}
inline VecF load_row(const BF16* p) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return {_mm512_castsi512_ps(_mm512_slli_epi32(w, 16))};
}
// Whether a lane of x is NaN or beyond +-FLT_MAX (a lane at -inf, masked, is fine).
inline bool any_not_finite(VecF x) {
  return _mm512_cmp_ps_mask(x.v, _mm512_set1_ps(kFltMax), _CMP_NLE_UQ) != 0;
}
#elif defined(__AVX2__)
inline VecF load_row(const F16* p) {
  return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))};
}
inline VecF load_row(const BF16* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return {_mm256_castsi256_ps(_mm256_slli_epi32(w, 16))};
}
inline bool any_not_finite(VecF x) {
  return _mm256_movemask_ps(_mm256_cmp_ps(x.v, _mm256_set1_ps(kFltMax), _CMP_NLE_UQ)) != 0;
}
#else
inline float to_f32(F16 h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h.bits & 0x8000u) << 16;
  const std::uint32_t exp = (h.bits >> 10) & 0x1fu, mant = h.bits & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else {  // zero or subnormal: mant * 2^-24, exact in f32
    const float f = static_cast<float>(mant) * 5.9604644775390625e-8f;
    std::memcpy(&bits, &f, 4);
    bits |= sign;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline float to_f32(BF16 h) {
  const std::uint32_t bits = static_cast<std::uint32_t>(h.bits) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
template <typename T>
inline VecF load_row(const T* p) {
  VecF r;
  for (int i = 0; i < kLanes; ++i) r.v[i] = to_f32(p[i]);
  return r;
}
inline bool any_not_finite(VecF x) {
  bool bad = false;
  for (int i = 0; i < kLanes; ++i) bad |= !(x.v[i] <= kFltMax);
  return bad;
}
#endif

// Scalar conversion for the staging path (head dims that are not whole vectors).
inline float element(const float* p, std::int64_t i) {
  return p[i];
}
inline float element(const F16* p, std::int64_t i) {
#if defined(__AVX512F__) || defined(__AVX2__)
  return _cvtsh_ss(p[i].bits);
#else
  return to_f32(p[i]);
#endif
}
inline float element(const BF16* p, std::int64_t i) {
  const std::uint32_t bits = static_cast<std::uint32_t>(p[i].bits) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The K and V rows of one key block, as pointers of storage T (or f32 staging rows).
template <typename T>
struct BlockRows {
  const T* k[kBlock];
  const T* v[kBlock];
};

// The next key block's rows, to prefetch while this block is computed (n = 0: none).
struct Ahead {
  const void* k[kBlock];
  const void* v[kBlock];
  int n = 0;
  std::int64_t k_bytes = 0, v_bytes = 0;
};

template <typename T>
void block_rows(const DecodeJob& job, std::int64_t j0, int n, BlockRows<T>& rows) {
  std::int64_t page = j0 / job.page_size, row = j0 % job.page_size;
  const T* kp = static_cast<const T*>(job.k_pages[page]) + job.k_offset;
  const T* vp = static_cast<const T*>(job.v_pages[page]) + job.v_offset;
  for (int jj = 0; jj < n; ++jj) {
    rows.k[jj] = kp + row * job.k_row_stride;
    rows.v[jj] = vp + row * job.v_row_stride;
    if (++row == job.page_size && jj + 1 < n) {
      row = 0;
      ++page;
      kp = static_cast<const T*>(job.k_pages[page]) + job.k_offset;
      vp = static_cast<const T*>(job.v_pages[page]) + job.v_offset;
    }
  }
}

// Asks for `bytes` of a row ahead of its use, into L2 (prefetcht1; an L1 target ran ~10%
// slower, a non-temporal one slower still). The next (kv head, key block)'s rows are requested
// while the current one is computed, a row per key computed, so the requests spread over the
// work instead of queuing in one burst.
inline void prefetch_row(const void* row, std::int64_t bytes) {
  const char* p = static_cast<const char*>(row);
  for (std::int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b, 0, 2);
}

// Copies a block's rows into zero-padded f32 staging rows (head dims not whole vectors).
template <typename T>
void stage_block(const DecodeJob& job, const BlockRows<T>& in, int n, BlockRows<float>& out) {
  for (int jj = 0; jj < n; ++jj) {
    float* k = job.k_stage + jj * job.dim_padded;
    float* v = job.v_stage + jj * job.dim_v_padded;
    for (std::int64_t d = 0; d < job.dim_padded; ++d) k[d] = d < job.dim ? element(in.k[jj], d) : 0;
    for (std::int64_t d = 0; d < job.dim_v_padded; ++d)
      v[d] = d < job.dim_v ? element(in.v[jj], d) : 0;
    out.k[jj] = k;
    out.v[jj] = v;
  }
}

// Stores the reduced dots of G keys and rows_valid rows (lane r * G + g: row r, key g) at
// scores[r * kBlock + g], keys below `keys` only, a row's G scores as one piece (sixteen scalar
// stores of a vector just written stall on store forwarding).
template <int G>
inline void store_dots(VecF reduced, int keys, int rows_valid, float* scores) {
  float dots[kLanes];
  store(dots, reduced);
  if (keys >= G) {
    for (int r = 0; r < rows_valid; ++r)
      std::memcpy(scores + r * kBlock, dots + r * G, sizeof(float) * G);
  } else {
    for (int r = 0; r < rows_valid; ++r)
      for (int g = 0; g < keys; ++g) scores[r * kBlock + g] = dots[r * G + g];
  }
}

// scores[r][jj] = q[r] . k[jj] for P rows starting at q (P a power of two <= kLanes) and the
// block's n keys. kLanes / P keys share one reduction.
template <int P, typename T>
void block_scores(const float* q, std::int64_t q_stride, std::int64_t vecs, const T* const* k,
                  int n, int rows_valid, float* scores, const Ahead& ahead, int ahead_n) {
  constexpr int G = kLanes / P;
  for (int j = 0; j < n; j += G) {
    for (int g = 0; g < G; ++g)
      if (j + g < ahead_n) prefetch_row(ahead.k[j + g], ahead.k_bytes);
    VecF acc[kLanes];
    for (VecF& a : acc) a = zero();
    const T* kr[G];
    for (int g = 0; g < G; ++g) kr[g] = k[j + g < n ? j + g : n - 1];
    for (std::int64_t c = 0; c < vecs; ++c)
      for (int g = 0; g < G; ++g) {
        const VecF kv = load_row(kr[g] + c * kLanes);
        for (int r = 0; r < P; ++r)
          acc[r * G + g] = fma(load(q + r * q_stride + c * kLanes), kv, acc[r * G + g]);
      }
    store_dots<G>(reduce_rows_add(acc), n - j, rows_valid, scores + j);
  }
}

#if defined(__AVX512BF16__)
// block_scores for bf16 K against q in bf16 (DecodeJob::q_bf16, exact: q holds the cache's
// dtype's values): vdpbf16ps takes 32 element pairs per instruction with exact products and f32
// sums, where block_scores converts K to f32 and needs twice the FMAs. dim a multiple of 32.
template <int P>
void block_scores_bf16_dot(const std::uint16_t* q, std::int64_t q_stride, std::int64_t dim,
                           const BF16* const* k, int n, int rows_valid, float* scores,
                           const Ahead& ahead, int ahead_n) {
  constexpr int G = kLanes / P;
  for (int j = 0; j < n; j += G) {
    for (int g = 0; g < G; ++g)
      if (j + g < ahead_n) prefetch_row(ahead.k[j + g], ahead.k_bytes);
    VecF acc[kLanes];
    for (VecF& a : acc) a = zero();
    const BF16* kr[G];
    for (int g = 0; g < G; ++g) kr[g] = k[j + g < n ? j + g : n - 1];
    for (std::int64_t c = 0; c < dim; c += 32)
      for (int g = 0; g < G; ++g) {
        const auto kv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(kr[g] + c));
        for (int r = 0; r < P; ++r)
          acc[r * G + g].v = _mm512_dpbf16_ps(
              acc[r * G + g].v,
              reinterpret_cast<__m512bh>(_mm512_loadu_si512(q + r * q_stride + c)), kv);
      }
    store_dots<G>(reduce_rows_add(acc), n - j, rows_valid, scores + j);
  }
}

bool bf16_dot_scores(const DecodeJob& job, const BF16* const* k, int n, std::int64_t rows,
                     const Ahead& ahead) {
  if (job.q_bf16 == nullptr || job.dim % 32 != 0) return false;
  int ahead_n = ahead.n;  // the first row group prefetches
  for (std::int64_t r0 = 0; r0 < rows; r0 += kLanes, ahead_n = 0) {
    const std::int64_t left = rows - r0;
    const int valid = static_cast<int>(left < kLanes ? left : kLanes);
    const std::uint16_t* q = job.q_bf16 + r0 * job.dim_padded;
    float* s = job.scores + r0 * kBlock;
    if (valid > kLanes / 2)
      block_scores_bf16_dot<kLanes>(q, job.dim_padded, job.dim, k, n, valid, s, ahead, ahead_n);
    else if (valid > kLanes / 4)
      block_scores_bf16_dot<kLanes / 2>(q, job.dim_padded, job.dim, k, n, valid, s, ahead, ahead_n);
    else if (valid > 2)
      block_scores_bf16_dot<4>(q, job.dim_padded, job.dim, k, n, valid, s, ahead, ahead_n);
    else if (valid == 2)
      block_scores_bf16_dot<2>(q, job.dim_padded, job.dim, k, n, valid, s, ahead, ahead_n);
    else
      block_scores_bf16_dot<1>(q, job.dim_padded, job.dim, k, n, valid, s, ahead, ahead_n);
  }
  return true;
}
#endif

template <typename T>
void all_scores(const DecodeJob& job, const T* const* k, int n, std::int64_t rows,
                const Ahead& ahead) {
#if defined(__AVX512BF16__)
  if constexpr (std::is_same_v<T, BF16>)
    if (bf16_dot_scores(job, k, n, rows, ahead)) return;
#endif
  const std::int64_t vecs = job.dim_padded / kLanes;
  int ahead_n = ahead.n;  // the first row group prefetches
  for (std::int64_t r0 = 0; r0 < rows; r0 += kLanes, ahead_n = 0) {
    const std::int64_t left = rows - r0;
    const int valid = static_cast<int>(left < kLanes ? left : kLanes);
    const float* q = job.q + r0 * job.dim_padded;
    float* s = job.scores + r0 * kBlock;
    if (valid > kLanes / 2)
      block_scores<kLanes>(q, job.dim_padded, vecs, k, n, valid, s, ahead, ahead_n);
    else if (valid > kLanes / 4)
      block_scores<kLanes / 2>(q, job.dim_padded, vecs, k, n, valid, s, ahead, ahead_n);
    else if (valid > 2)
      block_scores<4>(q, job.dim_padded, vecs, k, n, valid, s, ahead, ahead_n);
    else if (valid == 2)
      block_scores<2>(q, job.dim_padded, vecs, k, n, valid, s, ahead, ahead_n);
    else
      block_scores<1>(q, job.dim_padded, vecs, k, n, valid, s, ahead, ahead_n);
  }
}

// The score pipeline and online softmax of row r over the block's keys [j0, j0 + n): scores
// become probabilities (relative to the new running max); out is rescaled. Returns false when
// the row sees no key of the block.
bool softmax_row(const DecodeJob& job, std::int64_t r, std::int64_t j0, int n) {
  float* s = job.scores + r * kBlock;
  const std::int64_t lo = job.key_lo[r];
  const std::int64_t hi = job.key_hi[r] < j0 + n ? job.key_hi[r] : j0 + n;
  if (hi <= j0 || lo >= j0 + n || lo >= hi) {
    for (int j = 0; j < kBlock; ++j) s[j] = 0.0f;
    return false;
  }
  const bool plain = job.softcap == 0.0f && job.alibi_slope == nullptr;
  const float two_log2e_over_cap = job.softcap > 0.0f ? 2.0f * kLog2e / job.softcap : 0.0f;
  VecF mx = splat(-__builtin_inff());
  bool bad = false;
  for (int j = 0; j < kBlock; j += kLanes) {
    VecF x = load(s + j);
    // A scaled score beyond f32's range (either sign: an infinite q or K element, or an
    // overflow) or NaN becomes NaN (s + 0 * s), so that it poisons its row where the key is
    // visible; the mask replaces it elsewhere. (A -inf score left as it is would look masked.)
    if (plain) {
      x = mul(x, splat(job.scale_log2));
      x = mask_outside(fma(x, zero(), x), j0 + j, lo, hi);
      bad |= any_not_finite(x);
    } else {
      x = mul(x, splat(job.scale));
      x = fma(x, zero(), x);
      bad |= any_not_finite(mask_outside(x, j0 + j, lo, hi));
      if (job.softcap > 0.0f) x = softcap(x, job.softcap, two_log2e_over_cap);
      if (job.alibi_slope != nullptr) {
        const VecF key = add(splat(static_cast<float>(j0 + j)), lane_index());
        const VecF dist = vabs(sub(splat(static_cast<float>(job.alibi_pos[r])), key));
        x = sub(x, mul(splat(job.alibi_slope[r]), dist));
      }
      x = mask_outside(mul(x, splat(kLog2e)), j0 + j, lo, hi);
    }
    store(s + j, x);
    mx = vmax(mx, x);
  }
  if (bad) job.poison[r] = 1;
  const float m_old = job.row_max[r];
  const float m_blk = reduce_max(mx);
  const float m_new = m_blk > m_old ? m_blk : m_old;
  if (m_new == -__builtin_inff()) {  // every visible score underflowed to -inf: weight 0
    for (int j = 0; j < kBlock; ++j) s[j] = 0.0f;
    return true;
  }
  VecF sum = zero();
  for (int j = 0; j < kBlock; j += kLanes) {
    const VecF p = exp2_nonpositive(sub(load(s + j), splat(m_new)));
    store(s + j, p);
    sum = add(sum, p);
  }
  const float alpha = m_old == -__builtin_inff() ? 0.0f : std::exp2(m_old - m_new);
  job.row_sum[r] = job.row_sum[r] * alpha + reduce_add(sum);
  job.row_max[r] = m_new;
  if (alpha != 1.0f) {
    float* o = job.out + r * job.dim_v_padded;
    for (std::int64_t d = 0; d < job.dim_v_padded; d += kLanes)
      store(o + d, mul(load(o + d), splat(alpha)));
  }
  return true;
}

// out[r0 .. r0 + RP) vectors [c0, c0 + CV) += P V over the block's keys; keys flagged in
// `skip` (nullptr: none) are left out.
template <int RP, int CV, typename T>
void block_pv(const DecodeJob& job, std::int64_t r0, std::int64_t c0, const T* const* v, int n,
              const std::uint8_t* skip, const Ahead& ahead, int ahead_n) {
  VecF acc[RP][CV];
  for (int r = 0; r < RP; ++r)
    for (int c = 0; c < CV; ++c)
      acc[r][c] = load(job.out + (r0 + r) * job.dim_v_padded + (c0 + c) * kLanes);
  const float* p = job.scores + r0 * kBlock;
  for (int j = 0; j < n; ++j) {
    if (j < ahead_n) prefetch_row(ahead.v[j], ahead.v_bytes);
    if (skip != nullptr && skip[j] != 0) continue;
    VecF vv[CV];
    for (int c = 0; c < CV; ++c) vv[c] = load_row(v[j] + (c0 + c) * kLanes);
    for (int r = 0; r < RP; ++r) {
      const VecF pr = splat(p[r * kBlock + j]);
      for (int c = 0; c < CV; ++c) acc[r][c] = fma(pr, vv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < RP; ++r)
    for (int c = 0; c < CV; ++c)
      store(job.out + (r0 + r) * job.dim_v_padded + (c0 + c) * kLanes, acc[r][c]);
}

// The first call of a block prefetches the next block's V rows; `ahead_n` is then cleared.
template <int RP, typename T>
void block_pv_rows(const DecodeJob& job, std::int64_t r0, const T* const* v, int n,
                   const std::uint8_t* skip, const Ahead& ahead, int& ahead_n) {
  const std::int64_t vecs = job.dim_v_padded / kLanes;
  std::int64_t c = 0;
  for (; c + 4 <= vecs; c += 4, ahead_n = 0)
    block_pv<RP, 4>(job, r0, c, v, n, skip, ahead, ahead_n);
  switch (vecs - c) {
    case 3: block_pv<RP, 3>(job, r0, c, v, n, skip, ahead, ahead_n); break;
    case 2: block_pv<RP, 2>(job, r0, c, v, n, skip, ahead, ahead_n); break;
    case 1: block_pv<RP, 1>(job, r0, c, v, n, skip, ahead, ahead_n); break;
    default: break;
  }
  ahead_n = 0;
}

template <typename T>
void all_pv(const DecodeJob& job, const T* const* v, int n, const std::uint8_t* skip,
            const Ahead& ahead) {
  int ahead_n = ahead.n;
  std::int64_t r = 0;
  for (; r + 4 <= job.rows; r += 4) block_pv_rows<4>(job, r, v, n, skip, ahead, ahead_n);
  if (job.rows - r >= 2) {
    block_pv_rows<2>(job, r, v, n, skip, ahead, ahead_n);
    r += 2;
  }
  if (r < job.rows) block_pv_rows<1>(job, r, v, n, skip, ahead, ahead_n);
}

// Keys of the block that some row does not see but another does: a non-finite V there must not
// reach the rows that do not see it (0 * NaN). Such keys' V rows are checked; a bad one poisons
// the rows that see it and is left out of P V for all. Returns the skip flags, or nullptr.
template <typename T>
const std::uint8_t* partial_key_skips(const DecodeJob& job, std::int64_t j0, int n,
                                      const T* const* v, std::uint8_t* skip) {
  std::int64_t all_lo = job.key_begin, all_hi = job.key_end;  // seen by every row
  for (std::int64_t r = 0; r < job.rows; ++r) {
    if (job.key_lo[r] > all_lo) all_lo = job.key_lo[r];
    if (job.key_hi[r] < all_hi) all_hi = job.key_hi[r];
  }
  if (j0 >= all_lo && j0 + n <= all_hi) return nullptr;
  bool any = false;
  for (int j = 0; j < n; ++j) {
    skip[j] = 0;
    const std::int64_t key = j0 + j;
    if (key >= all_lo && key < all_hi) continue;
    bool finite = true;
    for (std::int64_t d = 0; d < job.dim_v; ++d) finite &= std::isfinite(element(v[j], d));
    if (finite) continue;
    skip[j] = 1;
    any = true;
    for (std::int64_t r = 0; r < job.rows; ++r)
      if (key >= job.key_lo[r] && key < job.key_hi[r]) job.poison[r] = 1;
  }
  return any ? skip : nullptr;
}

void begin_job(const DecodeJob& job) {
  for (std::int64_t r = 0; r < job.rows; ++r) {
    job.row_max[r] = -__builtin_inff();
    job.row_sum[r] = 0.0f;
    job.poison[r] = 0;
    for (std::int64_t d = 0; d < job.dim_v_padded; ++d) job.out[r * job.dim_v_padded + d] = 0.0f;
  }
}

// One key block [j0, j0 + n) of one job: scores, softmax, P V; `ahead` is prefetched meanwhile.
template <typename T>
void block_step(const DecodeJob& job, std::int64_t j0, int n, const BlockRows<T>& raw,
                const Ahead& ahead) {
  const bool staged = job.dim % kLanes != 0 || job.dim_v % kLanes != 0;
  BlockRows<float> staging;
  if (staged) {
    stage_block(job, raw, n, staging);
    all_scores(job, staging.k, n, job.rows, ahead);
  } else {
    all_scores(job, raw.k, n, job.rows, ahead);
  }
  bool seen = false;
  for (std::int64_t r = 0; r < job.rows; ++r) seen |= softmax_row(job, r, j0, n);
  if (!seen) return;
  std::uint8_t skip[kBlock];
  const std::uint8_t* skips = partial_key_skips(job, j0, n, raw.v, skip);
  if (staged)
    all_pv(job, staging.v, n, skips, ahead);
  else
    all_pv(job, raw.v, n, skips, ahead);
}

void end_job(const DecodeJob& job) {
  for (std::int64_t r = 0; r < job.rows; ++r) {
    float* o = job.out + r * job.dim_v_padded;
    const float sum = job.row_sum[r];
    bool poisoned = job.poison[r] != 0 || std::isnan(sum);
    for (std::int64_t d = 0; d < job.dim_v && !poisoned; ++d) poisoned = !std::isfinite(o[d]);
    if (poisoned) {
      for (std::int64_t d = 0; d < job.dim_v_padded; ++d) o[d] = __builtin_nanf("");
      job.lse[r] = __builtin_nanf("");
    } else if (sum == 0.0f) {
      for (std::int64_t d = 0; d < job.dim_v_padded; ++d) o[d] = 0.0f;
      job.lse[r] = -__builtin_inff();
    } else {
      const float inv = 1.0f / sum;
      for (std::int64_t d = 0; d < job.dim_v_padded; ++d) o[d] *= inv;
      job.lse[r] = (job.row_max[r] + std::log2(sum)) * kLn2;
    }
  }
}

// Key blocks outer, jobs (kv heads) inner: the heads' rows of a key lie side by side in the
// cache, so the bundle reads whole stretches of memory instead of one head's slice of each row
// (the hardware prefetchers fetch the neighbouring slices too, wasted unless used now). The
// next (job, block) in this order is prefetched while the current one is computed.
template <typename T>
void run(const DecodeJob* jobs, int count) {
  for (int h = 0; h < count; ++h) begin_job(jobs[h]);
  const std::int64_t key_begin = jobs[0].key_begin, key_end = jobs[0].key_end;
  // rows[cur]: the (head, block) computed now; rows[1 - cur]: the next one in this order, built
  // once as the prefetch target and then computed.
  BlockRows<T> rows[2];
  int cur = 0;
  Ahead ahead;
  ahead.k_bytes = jobs[0].dim * static_cast<std::int64_t>(sizeof(T));
  ahead.v_bytes = jobs[0].dim_v * static_cast<std::int64_t>(sizeof(T));
  if (key_begin < key_end)
    block_rows(jobs[0], key_begin,
               static_cast<int>(key_end - key_begin < kBlock ? key_end - key_begin : kBlock),
               rows[cur]);
  for (std::int64_t j0 = key_begin; j0 < key_end; j0 += kBlock) {
    const int n = static_cast<int>(key_end - j0 < kBlock ? key_end - j0 : kBlock);
    const std::int64_t j1 = j0 + kBlock;
    const int n1 = static_cast<int>(key_end - j1 < kBlock ? key_end - j1 : kBlock);
    for (int h = 0; h < count; ++h) {
      BlockRows<T>& next = rows[1 - cur];
      ahead.n = h + 1 < count ? n : (n1 > 0 ? n1 : 0);
      if (ahead.n > 0) {
        block_rows(jobs[h + 1 < count ? h + 1 : 0], h + 1 < count ? j0 : j1, ahead.n, next);
        for (int jj = 0; jj < ahead.n; ++jj) {
          ahead.k[jj] = next.k[jj];
          ahead.v[jj] = next.v[jj];
        }
      }
      block_step(jobs[h], j0, n, rows[cur], ahead);
      cur = 1 - cur;
    }
  }
  for (int h = 0; h < count; ++h) end_job(jobs[h]);
}

void decode(const DecodeJob* jobs, int count) {
  switch (jobs[0].storage) {
    case DecodeStorage::f32: run<float>(jobs, count); break;
    case DecodeStorage::f16: run<F16>(jobs, count); break;
    case DecodeStorage::bf16: run<BF16>(jobs, count); break;
  }
}

}  // namespace
}  // namespace tileattn::detail::TILEATTN_ISA_NAMESPACE

namespace tileattn::detail {
DecodeKernel TILEATTN_DECODE_GETTER() {
  return &TILEATTN_ISA_NAMESPACE::decode;
}
}  // namespace tileattn::detail
