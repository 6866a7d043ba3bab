// Instantiations of the sm80 backward kernel for head-dim bucket 256 (see flash_bwd_launch.hpp).
#include "cuda/sm80/flash_bwd_kernel.cuh"
#include "cuda/sm80/flash_bwd_launch.hpp"

namespace tileattn::cuda {

#define TILEATTN_DEFINE_FLASH_BWD(T, bucket, general) \
  template cudaError_t launch_flash_bwd<T, bucket, general>(const FlashBwdParams&, cudaStream_t);
TILEATTN_FLASH_BWD_BUCKET(TILEATTN_DEFINE_FLASH_BWD, 256)

}  // namespace tileattn::cuda
