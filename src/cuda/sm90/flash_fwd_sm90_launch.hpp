// Instantiation table of the sm90 (wgmma + TMA) forward: {f16, bf16} x head-dim bucket
// {64, 128, 256} x {fast, general score path} = 12 kernels, one translation unit per bucket
// (flash_fwd_sm90_hdim*.cu). The score path is the kGeneral argument here and the kernel's score
// policy type inside (CausalWindowScores, GeneralScores: sm90/flash_fwd_sm90_scores.cuh). The
// kernels have bodies only in the sm_90a pass (other passes compile an empty stub that the
// dispatcher never launches).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>

#include "cuda/common/flash_fwd_params.hpp"

namespace tileattn::cuda {

// For tests: caps the persistent grid of every sm90 forward launch at this many CTAs (0: one per
// SM), so that small shapes run many tiles per CTA.
inline std::atomic<unsigned> g_sm90_max_ctas{0};

// Returns cudaErrorNotSupported, launching nothing, when the tensors cannot be described by
// TMA descriptors (the dispatcher then runs the sm80 kernel).
template <typename T, int kBucket, bool kGeneral>
cudaError_t launch_flash_fwd_sm90(const FlashFwdParams& p, cudaStream_t stream);

// clang-format off
#define TILEATTN_FLASH_FWD_SM90_BUCKET(macro, bucket)                            \
  macro(__half, bucket, false) macro(__half, bucket, true)                       \
  macro(__nv_bfloat16, bucket, false) macro(__nv_bfloat16, bucket, true)

#define TILEATTN_DECLARE_FLASH_FWD_SM90(T, bucket, general) \
  extern template cudaError_t launch_flash_fwd_sm90<T, bucket, general>(const FlashFwdParams&, cudaStream_t);
TILEATTN_FLASH_FWD_SM90_BUCKET(TILEATTN_DECLARE_FLASH_FWD_SM90, 64)
TILEATTN_FLASH_FWD_SM90_BUCKET(TILEATTN_DECLARE_FLASH_FWD_SM90, 128)
TILEATTN_FLASH_FWD_SM90_BUCKET(TILEATTN_DECLARE_FLASH_FWD_SM90, 256)
// clang-format on

}  // namespace tileattn::cuda
