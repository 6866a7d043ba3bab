// Instantiation table of the sm90 (wgmma + TMA) backward: {f16, bf16} x head-dim bucket {64, 128}
// (fast score path only) = 4 launchers, one translation unit per bucket
// (flash_bwd_sm90_hdim*.cu); each launches one of two kernels, default or deterministic. The
// kernels have bodies only in the sm_90a pass.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/common/flash_bwd_params.hpp"

namespace tileattn::cuda {

// Enqueues the backward's three kernels (prepare, the sm90 main kernel, dq conversion); p's
// num_n_blocks counts key blocks of the sm90 block_n and its workspace is ready. Returns
// cudaErrorNotSupported, launching nothing, when TMA cannot describe the tensors.
template <typename T, int kBucket>
cudaError_t launch_flash_bwd_sm90(const FlashBwdParams& p, cudaStream_t stream);

// clang-format off
#define TILEATTN_FLASH_BWD_SM90_BUCKET(macro, bucket) macro(__half, bucket) macro(__nv_bfloat16, bucket)
#define TILEATTN_DECLARE_FLASH_BWD_SM90(T, bucket) \
  extern template cudaError_t launch_flash_bwd_sm90<T, bucket>(const FlashBwdParams&, cudaStream_t);
TILEATTN_FLASH_BWD_SM90_BUCKET(TILEATTN_DECLARE_FLASH_BWD_SM90, 64)
TILEATTN_FLASH_BWD_SM90_BUCKET(TILEATTN_DECLARE_FLASH_BWD_SM90, 128)
// clang-format on

}  // namespace tileattn::cuda
