#include "openblas_core.hpp"

#include <cblas.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tileattn::bench {

const char* openblas_core() noexcept {
  return openblas_get_corename();
}

void reexec_with_openblas_core_if_needed(char** argv) noexcept {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  if (std::strcmp(openblas_core(), "Prescott") != 0) return;
  const char* core = nullptr;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    core = "SkylakeX";
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    core = "Haswell";
  if (core == nullptr) return;
  std::fprintf(stderr,
               "tileattn: OpenBLAS did not recognise this CPU (generic Prescott kernels); "
               "restarting with OPENBLAS_CORETYPE=%s\n",
               core);
  setenv("OPENBLAS_CORETYPE", core, 1);
  execv("/proc/self/exe", argv);  // returns only on failure: carry on with the slow kernels
}

}  // namespace tileattn::bench
