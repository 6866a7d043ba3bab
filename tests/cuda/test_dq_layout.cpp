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

}  // namespace
}  // namespace tileattn::test
