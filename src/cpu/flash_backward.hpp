#pragma once
#include "api/params.hpp"

namespace tileattn::detail {

// The CPU flash-attention backward: FlashAttention-2's algorithm, tiled, SIMD, threaded over key
// blocks (each thread owns the dk/dv of its key block). dq is accumulated in per-thread partial
// buffers reduced in thread order, or, with p.deterministic, computed by a second pass over
// query tiles (each dq row by one thread in a fixed order: identical bits for any thread count).
void cpu_flash_backward(const AttnBackwardParams& p, int threads, CpuIsa isa_cap);

}  // namespace tileattn::detail
