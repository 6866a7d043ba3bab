// build_report(): the text of `tileattn info` (the CLI) and `python -m tileattn info`, one
// definition for both. The CUDA part lists the runtime, driver and devices when the library is
// built with the CUDA backend.
#include <sstream>
#include <string>

#include "tileattn/tileattn.hpp"

#if defined(TILEATTN_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace tileattn {
namespace {

void report_cuda(std::ostream& os) {
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

}  // namespace

std::string build_report() {
  const BuildInfo b = build_info();
  std::ostringstream os;
  os << "tileattn " << b.version << '\n'
     << "compiler: " << b.compiler << '\n'
     << "OpenMP: " << (b.openmp ? "yes" : "no") << '\n'
     << "CPU ISA (best detected): " << to_string(b.best_cpu_isa) << '\n'
     << "threads: " << b.max_threads << '\n'
     << "CUDA backend: " << (b.cuda ? "yes" : "no") << '\n';
  report_cuda(os);
  return os.str();
}

}  // namespace tileattn
