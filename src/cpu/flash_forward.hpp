#pragma once
#include "common/params.hpp"

namespace tileattn::detail {

// Detected at run time from CPUID and XGETBV (OS support for the register state).
CpuIsa detect_cpu_isa() noexcept;
// The ISA the CPU backend will use: the best detected one, capped by `cap`.
CpuIsa select_cpu_isa(CpuIsa cap) noexcept;
// Floats per vector of the f32 kernels (forward and backward) that run at this ISA level: 16 from
// avx512 up, else 8. The drivers pack Q for those kernels' micro-tile heights (tile_config.hpp).
int f32_kernel_lanes(CpuIsa isa) noexcept;

// The CPU flash-attention forward (tiled, online softmax, SIMD micro-kernels, OpenMP threads).
void cpu_flash_forward(const AttnParams& p, int threads, CpuIsa isa_cap);

}  // namespace tileattn::detail
