// The per-instruction-set entry points of the CPU flash kernel. Each is the same source
// (flash_kernel.inl) compiled with different target flags in its own translation unit.
#pragma once
#include "api/params.hpp"

namespace tileattn::detail {
void flash_forward_portable(const AttnParams& p, int threads);
void flash_forward_avx2(const AttnParams& p, int threads);
void flash_forward_avx512(const AttnParams& p, int threads);
void flash_forward_avx512_bf16(const AttnParams& p, int threads);
}  // namespace tileattn::detail
