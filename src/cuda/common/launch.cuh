// Host-side launch shared by the kernels: `blocks` CTAs of the tile configuration's threads and
// dynamic shared memory on the caller's stream, no synchronisation.
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/flash_fwd_params.hpp"

namespace tileattn::cuda {

template <typename Params, typename Config>
cudaError_t launch_kernel(void (*kernel)(const Params), const Config& cfg, const Params& params,
                          unsigned blocks, cudaStream_t stream) {
  const cudaError_t status =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, cfg.smem_bytes());
  if (status != cudaSuccess) return status;
  kernel<<<blocks, cfg.threads(), cfg.smem_bytes(), stream>>>(params);
  return cudaGetLastError();
}

inline unsigned query_block_count(const FlashFwdParams& p) {
  return static_cast<unsigned>(p.num_m_blocks) * static_cast<unsigned>(p.heads_q) *
         static_cast<unsigned>(p.batch);
}

// One CTA per (query block, head, batch).
template <typename Params, typename Config>
cudaError_t launch_over_query_blocks(void (*kernel)(const Params), const Config& cfg,
                                     const Params& params, const FlashFwdParams& p,
                                     cudaStream_t stream) {
  return launch_kernel(kernel, cfg, params, query_block_count(p), stream);
}

}  // namespace tileattn::cuda
