// TILEATTN_HOST_DEVICE: a function callable from host C++ and from CUDA device code (headers
// shared by both, e.g. common/philox.hpp, cuda/common/fast_divmod.hpp).
#pragma once

#if defined(__CUDACC__)
#define TILEATTN_HOST_DEVICE __host__ __device__
#else
#define TILEATTN_HOST_DEVICE
#endif
