// The instantiation table of the sm80 backward kernel, in one place:
//   element type {f16, bf16} x head-dim bucket {64, 128, 256} x kGeneral {false, true}
// = 12 kernels, one translation unit per bucket (flash_bwd_hdim<bucket>.cu). Head dims 96 and 192
// run in the 128 and 256 buckets (zero columns). kGeneral: a mask, softcap, ALiBi or dropout.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/common/flash_bwd_params.hpp"

namespace tileattn::cuda {

template <typename T, int kBucket, bool kGeneral>
cudaError_t launch_flash_bwd(const FlashBwdParams& p, cudaStream_t stream);

// clang-format off
#define TILEATTN_FLASH_BWD_BUCKET(macro, bucket) \
  macro(__half, bucket, false)                   \
  macro(__half, bucket, true)                    \
  macro(__nv_bfloat16, bucket, false)            \
  macro(__nv_bfloat16, bucket, true)

#define TILEATTN_DECLARE_FLASH_BWD(T, bucket, general) \
  extern template cudaError_t launch_flash_bwd<T, bucket, general>(const FlashBwdParams&, cudaStream_t);

TILEATTN_FLASH_BWD_BUCKET(TILEATTN_DECLARE_FLASH_BWD, 64)
TILEATTN_FLASH_BWD_BUCKET(TILEATTN_DECLARE_FLASH_BWD, 128)
TILEATTN_FLASH_BWD_BUCKET(TILEATTN_DECLARE_FLASH_BWD, 256)
// clang-format on

}  // namespace tileattn::cuda
