#include "cpu/tile_transpose.hpp"

#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace tileattn::detail {

void transpose_rows(const float* const* rows, std::int64_t n, std::int64_t cols, float* dst,
                    std::int64_t ld) {
  std::int64_t r = 0;
#if defined(__SSE2__)
  for (; r + 4 <= n; r += 4) {
    const float *a = rows[r], *b = rows[r + 1], *c = rows[r + 2], *d = rows[r + 3];
    std::int64_t k = 0;
    for (; k + 4 <= cols; k += 4) {
      __m128 x0 = _mm_loadu_ps(a + k), x1 = _mm_loadu_ps(b + k), x2 = _mm_loadu_ps(c + k),
             x3 = _mm_loadu_ps(d + k);
      _MM_TRANSPOSE4_PS(x0, x1, x2, x3);
      _mm_storeu_ps(dst + k * ld + r, x0);
      _mm_storeu_ps(dst + (k + 1) * ld + r, x1);
      _mm_storeu_ps(dst + (k + 2) * ld + r, x2);
      _mm_storeu_ps(dst + (k + 3) * ld + r, x3);
    }
    for (; k < cols; ++k)
      for (std::int64_t i = 0; i < 4; ++i) dst[k * ld + r + i] = rows[r + i][k];
  }
#endif
  for (; r < n; ++r)
    for (std::int64_t k = 0; k < cols; ++k) dst[k * ld + r] = rows[r][k];
}

void transpose_pairs(const std::uint16_t* const* rows, std::int64_t n, std::int64_t words,
                     std::uint16_t* dst, std::int64_t ld) {
  const auto copy_word = [&](std::int64_t r, std::int64_t w) {
    std::memcpy(dst + (w * ld + r) * 2, rows[r] + 2 * w, 4);
  };
  std::int64_t r = 0;
#if defined(__SSE2__)
  for (; r + 4 <= n; r += 4) {
    std::int64_t w = 0;
    for (; w + 4 <= words; w += 4) {
      const auto load = [&](int i) {
        return _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[r + i] + 2 * w));
      };
      const __m128i a = load(0), b = load(1), c = load(2), d = load(3);
      const __m128i ab_lo = _mm_unpacklo_epi32(a, b), cd_lo = _mm_unpacklo_epi32(c, d);
      const __m128i ab_hi = _mm_unpackhi_epi32(a, b), cd_hi = _mm_unpackhi_epi32(c, d);
      const __m128i out[4] = {_mm_unpacklo_epi64(ab_lo, cd_lo), _mm_unpackhi_epi64(ab_lo, cd_lo),
                              _mm_unpacklo_epi64(ab_hi, cd_hi), _mm_unpackhi_epi64(ab_hi, cd_hi)};
      for (int i = 0; i < 4; ++i)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + ((w + i) * ld + r) * 2), out[i]);
    }
    for (; w < words; ++w)
      for (int i = 0; i < 4; ++i) copy_word(r + i, w);
  }
#endif
  for (; r < n; ++r)
    for (std::int64_t w = 0; w < words; ++w) copy_word(r, w);
}

}  // namespace tileattn::detail
