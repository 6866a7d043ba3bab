// The f32 backward kernels' view of one call: the sm80 backward's FlashBwdParams (inputs,
// gradients, strides, every score option) plus the f32 path's own per-row workspace.
#pragma once

#include <cstdint>

#include "cuda/common/flash_bwd_params.hpp"

namespace tileattn::cuda::f32 {

// Row flags (one int per (b, h, i) row, index (b * heads_q + h) * len_q + i):
inline constexpr int kRowBad = 1;   // non-finite q, dout or out row, or lse NaN / +inf
inline constexpr int kRowLate = 2;  // sees a key whose K or V is not finite, or a score that is
                                    // NaN / +inf (found by the dQ or dK / dV kernel)

struct F32BwdParams : FlashBwdParams {
  float* lse_rows;    // [B, Hq, Lq]: the given lse, compact (natural log)
  float* delta_rows;  // [B, Hq, Lq]: rowsum(dO o O), 0 for a flagged row
  int* row_flags;     // [B, Hq, Lq]: kRowBad | kRowLate
};

}  // namespace tileattn::cuda::f32
