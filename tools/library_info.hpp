// What a Context will use on this machine, from the public build_info(): the CPU instruction-set
// level and the number of threads, for the tool's reports.
#pragma once

#include <cstdint>

#include "tileattn/tileattn.hpp"

namespace tileattn::tools {

// The level the CPU backend runs at under `cap`: the best detected one, capped (CpuIsa is ordered
// best first, so a larger value is a lower level).
inline CpuIsa cpu_isa_used(CpuIsa cap) {
  const CpuIsa best = build_info().best_cpu_isa;
  if (cap == CpuIsa::best) return best;
  return static_cast<std::uint8_t>(cap) > static_cast<std::uint8_t>(best) ? cap : best;
}

// The CPU threads a call with Context::threads = `requested` uses (0: the OpenMP default).
inline int threads_used(int requested) {
  const BuildInfo info = build_info();
  if (!info.openmp) return 1;
  return requested > 0 ? requested : info.max_threads;
}

}  // namespace tileattn::tools
