// Instantiations of the sm80 forward kernel for head-dim bucket 96 (see flash_fwd_launch.hpp).
#include "cuda/sm80/flash_fwd_kernel.cuh"
#include "cuda/sm80/flash_fwd_launch.hpp"

namespace tileattn::cuda {

#define TILEATTN_DEFINE_FLASH_FWD(T, bucket, general) \
  template cudaError_t launch_flash_fwd<T, bucket, general>(const FlashFwdParams&, cudaStream_t);
TILEATTN_FLASH_FWD_BUCKET(TILEATTN_DEFINE_FLASH_FWD, 96)

}  // namespace tileattn::cuda
