// Where the sm90 backward keeps dQ in the f32 workspace. Each (b, h, 64-row block) region of
// 64 x bucket floats (the region the row-major layout gives those rows) holds bucket / cols
// sub-tiles of 64 rows x `cols` columns side by side, each stored in the order of a
// warpgroup's wgmma accumulator fragments, so that each thread writes 16-byte vectors to
// consecutive addresses (no shared-memory bank conflicts) and a sub-tile is one contiguous
// block for the bulk reduction. Float4 number nt * 128 + thread of a sub-tile holds the
// thread's n8 tile nt: rows 16 warp + g and + 8, columns 8 nt + 2 t and + 1 (g = lane / 4,
// t = lane % 4), in the fragment order (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1).
#pragma once

#include <cstdint>

namespace tileattn::cuda {

// Offset, within one (b, h) plane of a workspace of `bucket` columns, of dQ row i, column d.
__host__ __device__ inline std::int64_t dq_tiled_offset(int i, int d, int cols, int bucket) {
  const int r = i % 64, c = d % cols;
  const int thread = (r / 16) * 32 + (r % 8) * 4 + (c % 8) / 2;
  const int element = ((r / 8) % 2) * 2 + c % 2;
  return static_cast<std::int64_t>(i / 64) * 64 * bucket + (d / cols) * 64 * cols +
         ((c / 8) * 128 + thread) * 4 + element;
}

// With one sub-tile of the whole width (cols == bucket, as the sm80 2-D backward kernel uses
// it): the offset, within one (b, h) plane, of the float4 that holds lane `lane`'s share of the
// m16 x n8 mma fragment whose rows start at row16 (a multiple of 16) and columns at col8 (a
// multiple of 8): elements 0, 1 are (row16 + g, col8 + 2t, + 1), elements 2, 3 the same 8 rows
// lower. Inside a 64-row block the next n8 tile is kDqNextN floats further, the next m16 tile
// kDqNextM.
__host__ __device__ constexpr int dq_fragment_offset(int row16, int col8, int lane, int bucket) {
  return row16 / 64 * 64 * bucket + ((col8 / 8) * 128 + (row16 % 64 / 16) * 32 + lane) * 4;
}
constexpr int kDqNextN = 128 * 4, kDqNextM = 32 * 4;

}  // namespace tileattn::cuda
