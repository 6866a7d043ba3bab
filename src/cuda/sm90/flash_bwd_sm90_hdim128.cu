// sm90 backward kernels of head-dim bucket 128 (see flash_bwd_sm90_launch.hpp).
#include "cuda/sm90/flash_bwd_sm90_launch.cuh"

namespace tileattn::cuda {
TILEATTN_FLASH_BWD_SM90_BUCKET(TILEATTN_DEFINE_FLASH_BWD_SM90, 128)
}  // namespace tileattn::cuda
