// Host-side launch shared by the kernels: one CTA per (query block, head, batch), the tile
// configuration's threads and dynamic shared memory, on the caller's stream, no synchronisation.
#pragma once

#include <cuda_runtime.h>

#include "cuda/sm80/flash_fwd_params.hpp"

namespace tileattn::cuda {

template <typename Params, typename Config>
cudaError_t launch_over_query_blocks(void (*kernel)(const Params), const Config& cfg,
                                     const Params& params, const FlashFwdParams& p,
                                     cudaStream_t stream) {
  const cudaError_t status = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, cfg.smem_bytes());
  if (status != cudaSuccess) return status;
  const unsigned blocks = static_cast<unsigned>(p.num_m_blocks) *
                          static_cast<unsigned>(p.heads_q) * static_cast<unsigned>(p.batch);
  kernel<<<blocks, cfg.threads(), cfg.smem_bytes(), stream>>>(params);
  return cudaGetLastError();
}

}  // namespace tileattn::cuda
