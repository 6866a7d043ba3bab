// sm90 forward kernels of head-dim bucket 64 (see flash_fwd_sm90_launch.hpp).
#include "cuda/sm90/flash_fwd_sm90_launch.cuh"

namespace tileattn::cuda {
TILEATTN_FLASH_FWD_SM90_BUCKET(TILEATTN_DEFINE_FLASH_FWD_SM90, 64)
}  // namespace tileattn::cuda
