// Shared by the bf16 kernels (AMX and AVX-512 bf16 dot product): probabilities are rounded to
// bf16 for P V. Included inside an ISA namespace after online_softmax.inl; needs AVX512-BF16.

// P (f32, in job.scores) -> bf16 rows of job.probs_bf16, rounding to nearest even.
void round_probabilities(const TileJob& job) {
  for (std::int64_t r = 0; r < job.rows; ++r) {
    const float* src = job.scores + r * kBlockK;
    std::uint16_t* dst = job.probs_bf16 + r * kBlockK;
    for (std::int64_t c = 0; c < kBlockK; c += 32) {
      const __m512bh pair = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + c + 16),
                                                _mm512_loadu_ps(src + c));
      _mm512_storeu_si512(dst + c, (__m512i)pair);
    }
  }
}
