// The decode kernel's instantiations (decode_launch.cu): bf16 and f16 x head-dim buckets 64, 128,
// 256.
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/decode_params.hpp"

namespace tileattn::cuda {

// The smallest bucket holding D and Dv.
int decode_bucket(int dim, int dim_v);
// Keys per pipeline block of that bucket's kernel (splits are multiples of it).
int decode_block_n(int bucket);
// CTAs of that bucket's kernel resident per SM on the current device (its occupancy).
int decode_ctas_per_sm(ElemType in_type, int bucket);
// Grid (splits, row_tiles * heads_kv, batch) on `stream`; returns the launch status.
cudaError_t launch_decode(const DecodeParams& p, int bucket, cudaStream_t stream);

}  // namespace tileattn::cuda
