// The sm90 backward's tiled dQ workspace layout (src/cuda/common/dq_layout.cuh): the convert
// kernel reads element (i, d) where the backward kernel's warpgroups store their wgmma
// accumulator fragments, and the layout is a one-to-one map of each 64-row region. Host-only:
// runs without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/common/dq_layout.cuh"

namespace tileattn::test {
namespace {

// Offset of the value the kernel stores as accumulator element e of n8 tile nt of `thread`
// (0..127) in sub-tile `sub` of the 64-row block `block`: float4 nt * 128 + thread of the
// sub-tile, element e.
std::int64_t stored_at(int block, int sub, int nt, int thread, int e, int cols, int bucket) {
  return static_cast<std::int64_t>(block) * 64 * bucket + sub * 64 * cols +
         (nt * 128 + thread) * 4 + e;
}

void check_layout(int cols, int bucket) {
  SCOPED_TRACE(testing::Message() << "cols " << cols << " bucket " << bucket);
  constexpr int kRows = 128;  // two 64-row blocks
  std::vector<int> hits(static_cast<std::size_t>(kRows) * bucket, 0);
  for (int block = 0; block < kRows / 64; ++block)
    for (int sub = 0; sub < bucket / cols; ++sub)
      for (int thread = 0; thread < 128; ++thread)
        for (int nt = 0; nt < cols / 8; ++nt)
          for (int e = 0; e < 4; ++e) {
            // The wgmma m64nN accumulator: warp w holds rows 16w + g (e < 2) and 16w + g + 8,
            // columns 8 nt + 2 t + (e % 2), with g = lane / 4, t = lane % 4.
            const int warp = thread / 32, lane = thread % 32;
            const int row = block * 64 + warp * 16 + lane / 4 + 8 * (e / 2);
            const int col = sub * cols + nt * 8 + 2 * (lane % 4) + e % 2;
            const std::int64_t read = cuda::dq_tiled_offset(row, col, cols, bucket);
            ASSERT_EQ(read, stored_at(block, sub, nt, thread, e, cols, bucket))
                << "row " << row << " col " << col;
            ASSERT_GE(read, 0);
            ASSERT_LT(read, static_cast<std::int64_t>(hits.size()));
            ++hits[static_cast<std::size_t>(read)];
          }
  for (std::size_t k = 0; k < hits.size(); ++k) ASSERT_EQ(hits[k], 1) << "offset " << k;
}

TEST(CudaDqLayout, FragmentOrderMatchesTheConvertKernel) {
  check_layout(32, 64);   // half the columns per consumer warpgroup (block_m 64 at D 64)
  check_layout(64, 128);  // D 128: one 64-column sub-tile per consumer warpgroup
  check_layout(64, 64);   // D 64 (block_m 128): each warpgroup its own 64-row region
}

// The sm80 2-D backward kernel's dQ reductions (one sub-tile of the whole width): each lane's
// float4 holds its four fragment values where the convert kernel reads them, and the kernel's
// per-lane base plus kDqNextN / kDqNextM steps reach the same float4 as the direct formula.
TEST(CudaDqLayout, FragmentOffsetsOfThe2dKernel) {
  for (const int bucket : {64, 128}) {
    SCOPED_TRACE(testing::Message() << "bucket " << bucket);
    for (int row16 = 0; row16 < 256; row16 += 16)
      for (int col8 = 0; col8 < bucket; col8 += 8)
        for (int lane = 0; lane < 32; ++lane)
          for (int e = 0; e < 4; ++e) {
            const int row = row16 + lane / 4 + 8 * (e / 2), col = col8 + 2 * (lane % 4) + e % 2;
            ASSERT_EQ(cuda::dq_fragment_offset(row16, col8, lane, bucket) + e,
                      cuda::dq_tiled_offset(row, col, bucket, bucket))
                << "row " << row << " col " << col;
          }
    // The kernel's warp tiles (Bwd2dConfig): block_m 64 at D 128, 128 at D 64; 2 x 4 warps of
    // block_m / 2 rows x D / 4 columns of dQ.
    const int block_m = bucket == 128 ? 64 : 128, rows = block_m / 2, cols = bucket / 4;
    for (int wm = 0; wm < 2; ++wm)
      for (int wn = 0; wn < 4; ++wn)
        for (int lane = 0; lane < 32; ++lane) {
          const int base = cuda::dq_fragment_offset(rows * wm, cols * wn, lane, bucket);
          for (int mt = 0; mt < rows / 16; ++mt)
            for (int nt = 0; nt < cols / 8; ++nt)
              ASSERT_EQ(
                  base + nt * cuda::kDqNextN + mt * cuda::kDqNextM,
                  cuda::dq_fragment_offset(rows * wm + 16 * mt, cols * wn + 8 * nt, lane, bucket))
                  << "wm " << wm << " wn " << wn << " mt " << mt << " nt " << nt;
        }
  }
}

}  // namespace
}  // namespace tileattn::test
