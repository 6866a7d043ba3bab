// The persistent sm90 backward's tile order (src/cuda/common/bwd_tile_order.cuh): every tile
// goes to exactly one CTA, each CTA's tiles come in increasing rounds, and the paired order
// evens out causal work. Host-only: runs without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "cuda/common/bwd_tile_order.cuh"

namespace tileattn::test {
namespace {

using cuda::bwd_cta_tile;

// Tiles of each CTA, in order; fails the test on a tile given twice or not at all.
std::vector<std::vector<int>> deal(int grid, int pairs, int n_blocks, bool paired) {
  const int num_tiles = pairs * n_blocks;
  std::vector<std::vector<int>> tiles(grid);
  std::vector<int> owner(num_tiles, -1);
  for (int c = 0; c < grid; ++c)
    for (int r = 0, t; (t = bwd_cta_tile(c, grid, r, num_tiles, n_blocks, paired)) >= 0; ++r) {
      EXPECT_LT(t, num_tiles);
      if (t >= num_tiles) break;
      EXPECT_EQ(owner[t], -1) << "tile " << t << " given to CTAs " << owner[t] << " and " << c;
      owner[t] = c;
      tiles[c].push_back(t);
      if (r > num_tiles) {
        ADD_FAILURE() << "CTA " << c << " never runs out of tiles";
        break;
      }
    }
  for (int t = 0; t < num_tiles; ++t) EXPECT_GE(owner[t], 0) << "tile " << t << " not dealt";
  return tiles;
}

TEST(BwdTileOrder, EveryTileOnce) {
  for (const bool paired : {false, true})
    for (const int grid : {1, 2, 3, 7, 132})
      for (const int pairs : {1, 2, 5, 128})
        for (const int n_blocks : {1, 2, 3, 5, 16, 17, 128}) {
          SCOPED_TRACE(::testing::Message() << "paired " << paired << " grid " << grid << " pairs "
                                            << pairs << " n_blocks " << n_blocks);
          deal(grid, pairs, n_blocks, paired);
        }
}

// Causal, square: key block n of a pair has n_blocks - n query blocks. Paired, every CTA's work
// is within one unit (n_blocks + 1 steps) of every other's; the units of one round span few
// pairs (L2 locality).
TEST(BwdTileOrder, PairedEvensOutCausalWork) {
  for (const int n_blocks : {16, 17, 64}) {
    const int grid = 132, pairs = 128;
    const auto tiles = deal(grid, pairs, n_blocks, true);
    int least = 1 << 30, most = 0;
    for (const auto& mine : tiles) {
      int steps = 0;
      for (const int t : mine) steps += n_blocks - t % n_blocks;
      least = std::min(least, steps), most = std::max(most, steps);
    }
    EXPECT_LE(most - least, n_blocks + 1) << "n_blocks " << n_blocks;
    int first_pair = pairs, last_pair = 0;
    for (int c = 0; c < grid; ++c) {
      first_pair = std::min(first_pair, tiles[c][0] / n_blocks);
      last_pair = std::max(last_pair, tiles[c][0] / n_blocks);
    }
    EXPECT_LE(last_pair - first_pair, 2 * grid / n_blocks + 1) << "n_blocks " << n_blocks;
  }
}

}  // namespace
}  // namespace tileattn::test
