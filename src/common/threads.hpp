// Thread-count resolution shared by the CPU backends.
#pragma once

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace tileattn::detail {

// requested <= 0 means the OpenMP default (OMP_NUM_THREADS or the number of cores).
inline int resolve_threads(int requested) noexcept {
#if defined(_OPENMP)
  return requested > 0 ? requested : omp_get_max_threads();
#else
  (void)requested;
  return 1;
#endif
}

// The calling thread's number within the innermost parallel region (0 outside one).
inline int thread_index() noexcept {
#if defined(_OPENMP)
  return omp_get_thread_num();
#else
  return 0;
#endif
}

}  // namespace tileattn::detail
