// The instantiation table of the sm80 forward kernel, in one place:
//   element type {f16, bf16} x head-dim bucket {64, 96, 128, 192, 256} x kGeneral {false, true}
// = 20 kernels, one translation unit per bucket (flash_fwd_hdim<bucket>.cu). kGeneral is true when
// a softcap, ALiBi slopes or a mask is present; causal, window and key lengths are runtime values.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/common/flash_fwd_params.hpp"

namespace tileattn::cuda {

template <typename T, int kBucket, bool kGeneral>
cudaError_t launch_flash_fwd(const FlashFwdParams& p, cudaStream_t stream);

// clang-format off
#define TILEATTN_FLASH_FWD_BUCKET(macro, bucket) \
  macro(__half, bucket, false)                   \
  macro(__half, bucket, true)                    \
  macro(__nv_bfloat16, bucket, false)            \
  macro(__nv_bfloat16, bucket, true)

#define TILEATTN_DECLARE_FLASH_FWD(T, bucket, general) \
  extern template cudaError_t launch_flash_fwd<T, bucket, general>(const FlashFwdParams&, cudaStream_t);

TILEATTN_FLASH_FWD_BUCKET(TILEATTN_DECLARE_FLASH_FWD, 64)
TILEATTN_FLASH_FWD_BUCKET(TILEATTN_DECLARE_FLASH_FWD, 96)
TILEATTN_FLASH_FWD_BUCKET(TILEATTN_DECLARE_FLASH_FWD, 128)
TILEATTN_FLASH_FWD_BUCKET(TILEATTN_DECLARE_FLASH_FWD, 192)
TILEATTN_FLASH_FWD_BUCKET(TILEATTN_DECLARE_FLASH_FWD, 256)
// clang-format on

}  // namespace tileattn::cuda
