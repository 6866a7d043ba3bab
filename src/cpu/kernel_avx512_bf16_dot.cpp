// The bf16-storage kernel for CPUs with the AVX-512 bf16 dot product (vdpbf16ps) but no AMX —
// Zen 4 and later, where it runs at twice the f32 FMA rate. Each instruction multiplies pairs of
// bf16 values exactly and accumulates in f32; K, V and the Q tile are packed in pairs along the
// reduction dimension (tile_config.hpp, family bf16_dot). Probabilities are rounded to bf16 for
// P V, as in the AMX kernel.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "cpu/kernels.hpp"
#include "cpu/tile_config.hpp"

#define TILEATTN_ISA_NAMESPACE isa_avx512_bf16_dot
#include "cpu/simd.hpp"

namespace tileattn::detail::isa_avx512_bf16_dot {
namespace {

#include "cpu/online_softmax.inl"
#include "cpu/round_probabilities.inl"

constexpr std::int64_t kDotBlockQ = cpu_tile_config(KernelFamily::bf16_dot).block_q;
constexpr int kQkRows = 12;  // S micro-tile: 12 rows x 32 keys (2 vectors)
constexpr int kPvRows = 6;   // O micro-tile: 6 rows x 64 columns (4 vectors)
constexpr int kPvVecs = 4;
static_assert(kBlockK % 32 == 0, "key block holds whole S micro-tiles");

inline __m512bh pair_splat(const std::uint16_t* pair) {
  std::uint32_t bits;
  std::memcpy(&bits, pair, sizeof bits);
  return (__m512bh)_mm512_set1_epi32(static_cast<int>(bits));
}

inline __m512bh load_pairs(const std::uint16_t* p) {
  return (__m512bh)_mm512_loadu_si512(p);
}

// scores[r][c0 .. c0 + 32) for r < Rows. q: [pairs][block_q][2] offset to the first row;
// k: [pairs][block_k][2].
template <int Rows>
inline void qk_micro(const std::uint16_t* q, std::int64_t pairs, const std::uint16_t* k,
                     std::int64_t c0, float* scores) {
  // pairs >= 1 (D >= 1); said so that g++ keeps acc in registers rather than copying it
  // through the stack around a loop that might not run.
  if (pairs < 1) __builtin_unreachable();
  __m512 acc[Rows][2];
  for (int r = 0; r < Rows; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (std::int64_t kk = 0; kk < pairs; ++kk) {
    const std::uint16_t* k_row = k + (kk * kBlockK + c0) * 2;
    const __m512bh k0 = load_pairs(k_row), k1 = load_pairs(k_row + 32);
    const std::uint16_t* q_row = q + kk * kDotBlockQ * 2;
    for (int r = 0; r < Rows; ++r) {
      const __m512bh a = pair_splat(q_row + r * 2);
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, k0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, k1);
    }
  }
  for (int r = 0; r < Rows; ++r) {
    _mm512_storeu_ps(scores + r * kBlockK + c0, acc[r][0]);
    _mm512_storeu_ps(scores + r * kBlockK + c0 + 16, acc[r][1]);
  }
}

void scores_block(const TileJob& job, const std::uint16_t* k_block) {
  const auto* q = static_cast<const std::uint16_t*>(job.q);
  const std::int64_t pairs = job.dim_padded / 2;
  for (std::int64_t c0 = 0; c0 < kBlockK; c0 += 32) {
    std::int64_t r0 = 0;
    for (; r0 + kQkRows <= job.rows; r0 += kQkRows)
      qk_micro<kQkRows>(q + r0 * 2, pairs, k_block, c0, job.scores + r0 * kBlockK);
    if (r0 < job.rows)
      with_rows<kQkRows - 1>(job.rows - r0, [&]<int R>() {
        qk_micro<R>(q + r0 * 2, pairs, k_block, c0, job.scores + r0 * kBlockK);
      });
  }
}

// out[r][col0 ..] = row_scale[r] * out[r] + P[r] V over Vecs vectors; p: bf16 rows [.][block_k],
// v: [block_k/2][dvp][2].
template <int Rows, int Vecs>
inline void pv_micro(const std::uint16_t* p, const std::uint16_t* v, std::int64_t dvp,
                     std::int64_t col0, const float* row_scale, float* out) {
  __m512 acc[Rows][Vecs];
  for (int r = 0; r < Rows; ++r) {
    const __m512 alpha = _mm512_set1_ps(row_scale[r]);
    for (int c = 0; c < Vecs; ++c)
      acc[r][c] = _mm512_mul_ps(alpha, _mm512_loadu_ps(out + r * dvp + col0 + c * 16));
  }
  for (std::int64_t kk = 0; kk < kBlockK / 2; ++kk) {
    __m512bh vk[Vecs];
    for (int c = 0; c < Vecs; ++c) vk[c] = load_pairs(v + (kk * dvp + col0 + c * 16) * 2);
    for (int r = 0; r < Rows; ++r) {
      const __m512bh a = pair_splat(p + r * kBlockK + kk * 2);
      for (int c = 0; c < Vecs; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], a, vk[c]);
    }
  }
  for (int r = 0; r < Rows; ++r)
    for (int c = 0; c < Vecs; ++c) _mm512_storeu_ps(out + r * dvp + col0 + c * 16, acc[r][c]);
}

template <int Vecs>
void pv_columns(const TileJob& job, const std::uint16_t* v_block, std::int64_t col0) {
  const std::int64_t dvp = job.dim_v_padded;
  std::int64_t r0 = 0;
  for (; r0 + kPvRows <= job.rows; r0 += kPvRows)
    pv_micro<kPvRows, Vecs>(job.probs_bf16 + r0 * kBlockK, v_block, dvp, col0, job.row_scale + r0,
                            job.out + r0 * dvp);
  if (r0 < job.rows)
    with_rows<kPvRows - 1>(job.rows - r0, [&]<int R>() {
      pv_micro<R, Vecs>(job.probs_bf16 + r0 * kBlockK, v_block, dvp, col0, job.row_scale + r0,
                        job.out + r0 * dvp);
    });
}

void accumulate_block(const TileJob& job, const std::uint16_t* v_block) {
  std::int64_t col0 = 0;
  for (; col0 + kPvVecs * 16 <= job.dim_v_padded; col0 += kPvVecs * 16)
    pv_columns<kPvVecs>(job, v_block, col0);
  for (; col0 < job.dim_v_padded; col0 += 16) pv_columns<1>(job, v_block, col0);
}

void attend_tile(const TileJob& job) {
  const TileBounds bounds = begin_tile(job);
  stream_key_blocks(job, bounds, scores_block, accumulate_block);
  finish_tile(job);
}

}  // namespace
}  // namespace tileattn::detail::isa_avx512_bf16_dot

namespace tileattn::detail {
TileKernel cpu_tile_kernel_avx512_bf16_dot() {
  return &isa_avx512_bf16_dot::attend_tile;
}
}  // namespace tileattn::detail
