// Instantiation table of the sm90 (wgmma) forward: {f16, bf16} x head-dim bucket {64, 128}, fast
// score path only. Compiled into flash_fwd_sm90.cu; the kernels have bodies only in the sm_90a
// pass (other passes compile an empty stub that the dispatcher never launches).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/sm80/flash_fwd_params.hpp"

namespace tileattn::cuda {

template <typename T, int kBucket>
cudaError_t launch_flash_fwd_sm90(const FlashFwdParams& p, cudaStream_t stream);

// Buckets the sm90 kernel covers.
constexpr bool sm90_supports_bucket(int bucket) {
  return bucket == 64 || bucket == 128;
}

// clang-format off
#define TILEATTN_FLASH_FWD_SM90(macro) \
  macro(__half, 64) macro(__half, 128) macro(__nv_bfloat16, 64) macro(__nv_bfloat16, 128)

#define TILEATTN_DECLARE_FLASH_FWD_SM90(T, bucket) \
  extern template cudaError_t launch_flash_fwd_sm90<T, bucket>(const FlashFwdParams&, cudaStream_t);
TILEATTN_FLASH_FWD_SM90(TILEATTN_DECLARE_FLASH_FWD_SM90)
// clang-format on

}  // namespace tileattn::cuda
