// The AMX kernel of the CPU flash forward for bf16 storage (Sapphire Rapids and later).
// Q K^T and P V run on the tile unit (TDPBF16PS: 16x16 f32 += 16x32 bf16 . 32x16 bf16); the
// score modification and online softmax run on AVX-512 (online_softmax.inl), which then rounds
// the probabilities to bf16 for P V, as GPU flash kernels do.
//
// Tile registers, one configuration for the whole kernel (16 rows x 64 bytes each):
//   0-3  C: a 32 x 32 f32 block (2 row tiles x 2 column tiles) of S or of the output
//   4-5  A: two 16-row slices of Q (32 d each) or of P (32 keys each)
//   6-7  B: two 16-column slices of packed K (32 d each) or of packed V (32 keys each)
#include <immintrin.h>

#include <cstdint>
#include <utility>

#include "cpu/kernels.hpp"
#include "cpu/tile_config.hpp"

#define TILEATTN_ISA_NAMESPACE isa_amx_bf16
#include "cpu/simd.hpp"

namespace tileattn::detail::isa_amx_bf16 {
namespace {

#include "cpu/online_softmax.inl"
#include "cpu/round_probabilities.inl"

constexpr std::int64_t kAmxBlockQ = cpu_tile_config(KernelFamily::amx).block_q;
static_assert(kAmxBlockQ % 32 == 0 && kBlockK % 32 == 0, "whole 32 x 32 tile blocks");

struct alignas(64) TileConfig {
  std::uint8_t palette_id;
  std::uint8_t start_row;
  std::uint8_t reserved[14];
  std::uint16_t bytes_per_row[16];
  std::uint8_t rows[16];
};

void configure_tiles() {
  TileConfig config{};
  config.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = 16;
    config.bytes_per_row[t] = 64;
  }
  _tile_loadconfig(&config);
}

// C (tiles 0-3) += A . B over `chunks` 32-deep slices; A rows at a, a + 16 * a_stride; B columns
// at b, b + 16 pairs; strides in elements.
inline void multiply_32x32(const std::uint16_t* a, std::int64_t a_stride, std::int64_t a_step,
                           const std::uint16_t* b, std::int64_t b_stride, std::int64_t b_step,
                           std::int64_t chunks) {
  for (std::int64_t i = 0; i < chunks; ++i, a += a_step, b += b_step) {
    _tile_loadd(4, a, a_stride * 2);
    _tile_loadd(5, a + 16 * a_stride, a_stride * 2);
    _tile_loadd(6, b, b_stride * 2);
    _tile_loadd(7, b + 32, b_stride * 2);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
}

inline void store_32x32(float* c, std::int64_t stride) {
  _tile_stored(0, c, stride * 4);
  _tile_stored(1, c + 16, stride * 4);
  _tile_stored(2, c + 16 * stride, stride * 4);
  _tile_stored(3, c + 16 * stride + 16, stride * 4);
}

inline void load_32x32(const float* c, std::int64_t stride) {
  _tile_loadd(0, c, stride * 4);
  _tile_loadd(1, c + 16, stride * 4);
  _tile_loadd(2, c + 16 * stride, stride * 4);
  _tile_loadd(3, c + 16 * stride + 16, stride * 4);
}

// S[rows][block_k] = Q K^T for one key block (K as [dp/2][block_k][2]).
void scores_block(const TileJob& job, const std::uint16_t* k_block) {
  const auto* q = static_cast<const std::uint16_t*>(job.q);
  const std::int64_t dp = job.dim_padded;
  for (std::int64_t r0 = 0; r0 < job.rows; r0 += 32)
    for (std::int64_t c0 = 0; c0 < kBlockK; c0 += 32) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      // A: Q rows r0.., 32 d per chunk. B: pair rows of 16 d-pairs, columns c0.. (2 values each).
      multiply_32x32(q + r0 * dp, dp, 32, k_block + c0 * 2, kBlockK * 2, 16 * kBlockK * 2, dp / 32);
      store_32x32(job.scores + r0 * kBlockK + c0, kBlockK);
    }
}

// out = row_scale * out + P V for one key block (V as [block_k/2][dvp][2]).
void accumulate_block(const TileJob& job, const std::uint16_t* v_block) {
  const std::int64_t dvp = job.dim_v_padded;
  for (std::int64_t r = 0; r < job.rows; ++r) {
    const float alpha = job.row_scale[r];
    if (alpha == 1.0f) continue;
    float* o = job.out + r * dvp;
    for (std::int64_t c = 0; c < dvp; c += kLanes) store(o + c, mul(load(o + c), splat(alpha)));
  }
  for (std::int64_t r0 = 0; r0 < job.rows; r0 += 32)
    for (std::int64_t c0 = 0; c0 < dvp; c0 += 32) {
      float* o = job.out + r0 * dvp + c0;
      load_32x32(o, dvp);
      // A: P rows r0.., 32 keys per chunk. B: 16 key pairs, columns c0.. (2 values each).
      multiply_32x32(job.probs_bf16 + r0 * kBlockK, kBlockK, 32, v_block + c0 * 2, dvp * 2,
                     16 * dvp * 2, kBlockK / 32);
      store_32x32(o, dvp);
    }
}

void attend_tile(const TileJob& job) {
  configure_tiles();
  const TileBounds bounds = begin_tile(job);
  // Padding rows of the last 32-row block: zero probabilities and accumulator, never stored.
  const std::int64_t padded_rows = (job.rows + 31) / 32 * 32;
  for (std::int64_t r = job.rows; r < padded_rows; ++r) {
    for (std::int64_t c = 0; c < kBlockK; ++c) job.probs_bf16[r * kBlockK + c] = 0;
    for (std::int64_t c = 0; c < job.dim_v_padded; ++c) job.out[r * job.dim_v_padded + c] = 0.0f;
  }
  stream_key_blocks(job, bounds, scores_block, accumulate_block);
  _tile_release();
  finish_tile(job);
}

}  // namespace
}  // namespace tileattn::detail::isa_amx_bf16

namespace tileattn::detail {
TileKernel cpu_tile_kernel_amx_bf16() {
  return &isa_amx_bf16::attend_tile;
}
}  // namespace tileattn::detail
