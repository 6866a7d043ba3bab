// Shared by the bf16 kernels (AMX and AVX-512 bf16 dot product): the key-block loop, with the
// probabilities rounded to bf16 for P V. Included inside an ISA namespace after
// online_softmax.inl; needs AVX512-BF16.

// P (f32, in job.scores) -> bf16 rows of job.probs_bf16, rounding to nearest even.
void round_probabilities(const TileJob& job) {
  for (std::int64_t r = 0; r < job.rows; ++r) {
    const float* src = job.scores + r * kBlockK;
    std::uint16_t* dst = job.probs_bf16 + r * kBlockK;
    for (std::int64_t c = 0; c < kBlockK; c += 32) {
      const __m512bh pair =
          _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + c + 16), _mm512_loadu_ps(src + c));
      _mm512_storeu_si512(dst + c, (__m512i)pair);
    }
  }
}

// Streams the tile's key blocks: S = Q K^T (scores), online softmax, P to bf16, O += P V
// (accumulate). K and V are packed as [dim_padded/2][block_k][2] and [block_k/2][dvp][2].
template <typename Scores, typename Accumulate>
inline void stream_key_blocks(const TileJob& job, const TileBounds& bounds, Scores scores,
                              Accumulate accumulate) {
  const auto* k_packed = static_cast<const std::uint16_t*>(job.k_packed);
  const auto* v_packed = static_cast<const std::uint16_t*>(job.v_packed);
  for (std::int64_t kb = job.block_begin; kb < job.block_end; ++kb) {
    scores(job, k_packed + kb * job.dim_padded * kBlockK);
    softmax_block(job, bounds, kb * kBlockK);
    round_probabilities(job);
    accumulate(job, v_packed + kb * kBlockK * job.dim_v_padded);
  }
}
