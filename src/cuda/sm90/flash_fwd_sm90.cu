// Instantiations of the sm90 forward kernel (see flash_fwd_sm90_launch.hpp).
#include "cuda/sm90/flash_fwd_sm90.cuh"
#include "cuda/sm90/flash_fwd_sm90_launch.hpp"

namespace tileattn::cuda {

#define TILEATTN_DEFINE_FLASH_FWD_SM90(T, bucket) \
  template cudaError_t launch_flash_fwd_sm90<T, bucket>(const FlashFwdParams&, cudaStream_t);
TILEATTN_FLASH_FWD_SM90(TILEATTN_DEFINE_FLASH_FWD_SM90)

}  // namespace tileattn::cuda
