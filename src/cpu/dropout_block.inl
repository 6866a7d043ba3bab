// The dropout keep/drop decisions of one score block, shared by the f32 forward and backward
// kernels. Included inside an ISA namespace's anonymous namespace, after online_softmax.inl
// (kLanes, kBlockK); common/philox.hpp defines the decision (docs/semantics.md), so every backend
// drops the same elements.

#if defined(__AVX512F__)
// The 32 x 32 -> 64-bit products of 16 lanes by a constant: low and high halves.
inline void mulhilo16(__m512i a, __m512i multiplier, __m512i& lo, __m512i& hi) {
  const __m512i even = _mm512_mul_epu32(a, multiplier);                        // lanes 0, 2, ..
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), multiplier);  // lanes 1, 3, ..
  lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
  hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
}

// One row of a key block: the 16 Philox calls of its 64 keys run in the 16 lanes, lane l on
// the counter (key0 / 4 + l, i, lo(s), hi(s)) exactly as dropout_words() (tested bit for bit).
inline void dropout_row(const DropoutParams& d, std::int64_t b, std::int64_t h, std::int64_t i,
                        std::int64_t key0, float* keep) {
  static_assert(kBlockK == 64, "16 lanes x 4 words cover one key block");
  const std::uint64_t stream = d.offset + static_cast<std::uint64_t>(b * d.heads_q + h);
  __m512i c0 =
      _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(key0 >> 2)),
                       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  __m512i c1 = _mm512_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(i)));
  __m512i c2 = _mm512_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(stream)));
  __m512i c3 = _mm512_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(stream >> 32)));
  auto key0_word = static_cast<std::uint32_t>(d.seed),
       key1_word = static_cast<std::uint32_t>(d.seed >> 32);
  const __m512i mul0 = _mm512_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m512i mul1 = _mm512_set1_epi32(static_cast<int>(0xCD9E8D57u));
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0_word += 0x9E3779B9u;
      key1_word += 0xBB67AE85u;
    }
    __m512i lo0, hi0, lo1, hi1;
    mulhilo16(c0, mul0, lo0, hi0);
    mulhilo16(c2, mul1, lo1, hi1);
    c0 =
        _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32(static_cast<int>(key0_word)));
    c1 = lo1;
    c2 =
        _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32(static_cast<int>(key1_word)));
    c3 = lo0;
  }
  // f_n[l] = factor of key key0 + 4 l + n; key 16 v + 4 a + n is f_n[4 v + a]: a 4 x 4
  // transpose inside each 128-bit lane, then one of the 128-bit lanes across the registers.
  const __m512i threshold = _mm512_set1_epi32(static_cast<int>(d.threshold));
  const __m512 scale = _mm512_set1_ps(d.keep_scale);
  const __m512 f0 = _mm512_maskz_mov_ps(_mm512_cmpge_epu32_mask(c0, threshold), scale);
  const __m512 f1 = _mm512_maskz_mov_ps(_mm512_cmpge_epu32_mask(c1, threshold), scale);
  const __m512 f2 = _mm512_maskz_mov_ps(_mm512_cmpge_epu32_mask(c2, threshold), scale);
  const __m512 f3 = _mm512_maskz_mov_ps(_mm512_cmpge_epu32_mask(c3, threshold), scale);
  const __m512 lo01 = _mm512_unpacklo_ps(f0, f1), hi01 = _mm512_unpackhi_ps(f0, f1);
  const __m512 lo23 = _mm512_unpacklo_ps(f2, f3), hi23 = _mm512_unpackhi_ps(f2, f3);
  const __m512 t0 = _mm512_shuffle_ps(lo01, lo23, _MM_SHUFFLE(1, 0, 1, 0));  // a = 0
  const __m512 t1 = _mm512_shuffle_ps(lo01, lo23, _MM_SHUFFLE(3, 2, 3, 2));  // a = 1
  const __m512 t2 = _mm512_shuffle_ps(hi01, hi23, _MM_SHUFFLE(1, 0, 1, 0));  // a = 2
  const __m512 t3 = _mm512_shuffle_ps(hi01, hi23, _MM_SHUFFLE(3, 2, 3, 2));  // a = 3
  const __m512 u0 = _mm512_shuffle_f32x4(t0, t1, _MM_SHUFFLE(1, 0, 1, 0));
  const __m512 u1 = _mm512_shuffle_f32x4(t0, t1, _MM_SHUFFLE(3, 2, 3, 2));
  const __m512 u2 = _mm512_shuffle_f32x4(t2, t3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m512 u3 = _mm512_shuffle_f32x4(t2, t3, _MM_SHUFFLE(3, 2, 3, 2));
  _mm512_storeu_ps(keep, _mm512_shuffle_f32x4(u0, u2, _MM_SHUFFLE(2, 0, 2, 0)));
  _mm512_storeu_ps(keep + 16, _mm512_shuffle_f32x4(u0, u2, _MM_SHUFFLE(3, 1, 3, 1)));
  _mm512_storeu_ps(keep + 32, _mm512_shuffle_f32x4(u1, u3, _MM_SHUFFLE(2, 0, 2, 0)));
  _mm512_storeu_ps(keep + 48, _mm512_shuffle_f32x4(u1, u3, _MM_SHUFFLE(3, 1, 3, 1)));
}
#else
inline void dropout_row(const DropoutParams& d, std::int64_t b, std::int64_t h, std::int64_t i,
                        std::int64_t key0, float* keep) {
  for (std::int64_t c = 0; c < kBlockK; c += 4) {
    const Philox4x32 words = dropout_words(d, b, h, i, (key0 + c) >> 2);
    for (int n = 0; n < 4; ++n) keep[c + n] = words.v[n] >= d.threshold ? d.keep_scale : 0.0f;
  }
}
#endif

// keep[r * kBlockK + c] = keep_scale if element (row0 + r, key0 + c) of head (b, h) is kept,
// else 0, for r < rows. key0 is a multiple of 4: each Philox call decides four keys.
inline void dropout_factors(const DropoutParams& d, std::int64_t b, std::int64_t h,
                            std::int64_t row0, std::int64_t rows, std::int64_t key0, float* keep) {
  static_assert(kBlockK % 4 == 0, "one Philox call decides four keys");
  for (std::int64_t r = 0; r < rows; ++r) dropout_row(d, b, h, row0 + r, key0, keep + r * kBlockK);
}

// rows[r][c] *= keep[r][c] for r < rows.
inline void apply_factors(const float* keep, std::int64_t rows, float* values) {
  for (std::int64_t n = 0; n < rows * kBlockK; n += kLanes)
    store(values + n, mul(load(values + n), load(keep + n)));
}
