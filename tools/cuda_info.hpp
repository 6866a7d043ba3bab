// Hook for `tileattn info`: lists the CUDA devices. cuda_info.cpp holds the implementation; in a
// build without CUDA it prints "CUDA: not built". The CUDA backend fills the TILEATTN_WITH_CUDA
// branch (cudaGetDeviceCount / cudaGetDeviceProperties: name, sm_XY, memory).
#pragma once

#include <ostream>

namespace tileattn::tools {

void print_cuda_devices(std::ostream& os);

}  // namespace tileattn::tools
