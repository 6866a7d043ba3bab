// Launch of one f32 kernel: `blocks` CTAs of `threads` threads with `smem_bytes` of dynamic
// shared memory, on the caller's stream, no synchronisation. Returns the launch status.
#pragma once

#include <cuda_runtime.h>

#include "cuda/f32/f32_config.hpp"

namespace tileattn::cuda::f32 {

template <typename Params>
cudaError_t launch_f32(void (*kernel)(const Params), int smem_bytes, unsigned blocks,
                       const Params& params, cudaStream_t stream, int threads = kThreads) {
  if (blocks == 0) return cudaSuccess;
  if (smem_bytes > 0) {
    const cudaError_t status =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
    if (status != cudaSuccess) return status;
  }
  kernel<<<blocks, threads, smem_bytes, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace tileattn::cuda::f32
