#pragma once
#include "common/params.hpp"

namespace tileattn::detail {

// The CPU flash-attention backward: FlashAttention-2's algorithm, tiled, SIMD, threaded over key
// blocks (each thread owns the dk/dv of its key block). dq is accumulated in per-thread partial
// buffers reduced in thread order, or, with p.deterministic, in one shared buffer per query tile
// that takes its key blocks' contributions in increasing order (identical bits for any thread
// count).
void cpu_flash_backward(const AttnBackwardParams& p, int threads, CpuIsa isa_cap);

}  // namespace tileattn::detail
