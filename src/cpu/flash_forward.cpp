#include "cpu/flash_forward.hpp"

#include "cpu/kernels.hpp"

namespace tileattn::detail {

void cpu_flash_forward(const AttnParams& p, int threads, CpuIsa isa_cap) {
  switch (select_cpu_isa(isa_cap)) {
    case CpuIsa::avx512_bf16: flash_forward_avx512_bf16(p, threads); return;
    case CpuIsa::avx512: flash_forward_avx512(p, threads); return;
    case CpuIsa::avx2: flash_forward_avx2(p, threads); return;
    default: flash_forward_portable(p, threads); return;
  }
}

}  // namespace tileattn::detail
