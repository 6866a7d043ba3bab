// The f32-accurate CUDA path for f32 storage (the default for f32; Context::cuda_f32_via_bf16
// selects the bf16 tensor-core kernels instead): host entry points, called by
// cuda_flash_forward and cuda_flash_backward (src/cuda/cuda_forward.cu, cuda_backward.cu).
#pragma once

#include <cstddef>

#include "common/params.hpp"

namespace tileattn::detail {

// Enqueues the f32 forward on `stream` (a cudaStream_t). No allocation, no synchronisation.
void cuda_f32_forward(const AttnParams& p, void* stream);

// Enqueues the f32 backward on `stream`: prepare (delta, row flags), dQ, dK / dV, then NaN for
// the gradients that poisoned rows reach. Its workspace, 12 bytes per (b, h, i) row
// (cuda_f32_backward_workspace_bytes), is `workspace` when given, else stream-ordered from the
// library's pool. Deterministic whatever AttnBackwardParams::deterministic says.
void cuda_f32_backward(const AttnBackwardParams& p, void* stream, void* workspace = nullptr);
std::size_t cuda_f32_backward_workspace_bytes(const AttnBackwardParams& p);

}  // namespace tileattn::detail
