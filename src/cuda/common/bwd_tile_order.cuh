// Which backward tiles a persistent CTA takes, and in what order. A tile is key block n of one
// (batch, kv head) pair, numbered pair * n_blocks + n (a pair's key blocks side by side, so the
// CTAs running at one time share few pairs' Q / dO in L2).
//
// Uniform work (no causal / window mask): CTA c takes tiles c, c + grid, c + 2 grid, ...
//
// Paired (causal / window masks: a key block's step count falls or rises with n): the unit of
// work is the two key blocks j and n_blocks - 1 - j of one pair, whose step counts add up to
// about the same for every j (exactly under a causal mask with square blocks), numbered
// pair * (n_blocks / 2) + j; an odd n_blocks leaves each pair's middle block, and these single
// units come after all the double ones. CTA c takes units c, c + grid, ..., a double unit's two
// tiles one after the other. The units stay pair-major, so the L2 locality of the uniform order
// is kept (a key-block-major order, which sorts tiles by length, made the running CTAs stream
// 132 different pairs' Q / dO from HBM).
#pragma once

namespace tileattn::cuda {

// The r-th tile (r = 0, 1, ...) of CTA `cta` of `grid`, or -1 past its last.
__host__ __device__ inline int bwd_cta_tile(int cta, int grid, int r, int num_tiles, int n_blocks,
                                            bool paired) {
  if (!paired) {
    const long long t = static_cast<long long>(r) * grid + cta;
    return t < num_tiles ? static_cast<int>(t) : -1;
  }
  const int pairs = num_tiles / n_blocks, half = n_blocks / 2;
  const int doubles = pairs * half;  // double units
  const int mine = cta < doubles ? (doubles - 1 - cta) / grid + 1 : 0;  // this CTA's doubles
  if (r < 2 * mine) {
    const int unit = cta + (r / 2) * grid;
    const int pair = unit / half, j = unit % half;
    return pair * n_blocks + ((r & 1) != 0 ? n_blocks - 1 - j : j);
  }
  if (n_blocks % 2 == 0) return -1;
  const long long single = cta + static_cast<long long>(r - mine) * grid - doubles;
  return single < pairs ? static_cast<int>(single) * n_blocks + half : -1;
}

}  // namespace tileattn::cuda
