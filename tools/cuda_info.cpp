#include "cuda_info.hpp"

#if defined(TILEATTN_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace tileattn::tools {

void print_cuda_devices(std::ostream& os) {
#if defined(TILEATTN_WITH_CUDA)
  int runtime = 0, driver = 0, count = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  const cudaError_t status = cudaGetDeviceCount(&count);
  os << "CUDA: built in (runtime " << runtime / 1000 << "." << runtime % 1000 / 10 << ", driver "
     << driver / 1000 << "." << driver % 1000 / 10 << ")";
  if (status != cudaSuccess) {
    os << ", no usable device: " << cudaGetErrorString(status) << "\n";
    return;
  }
  os << ", " << count << " device" << (count == 1 ? "" : "s") << "\n";
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
    os << "  cuda:" << d << "  " << prop.name << ", sm_" << prop.major << prop.minor << ", "
       << prop.multiProcessorCount << " SMs, " << (prop.totalGlobalMem >> 20) << " MiB, "
       << (prop.sharedMemPerBlockOptin >> 10) << " KiB shared memory per block"
       << (prop.major == 9 && prop.minor == 0 ? " (wgmma kernel)" : "") << "\n";
  }
#else
  os << "CUDA: not built\n";
#endif
}

}  // namespace tileattn::tools
