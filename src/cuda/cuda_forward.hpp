// CUDA backend entry points, called by attention_forward and attention_backward for device tensors
// (src/api/attention.cpp).
#pragma once

#include <cstddef>

#include "common/merge_params.hpp"
#include "common/params.hpp"

namespace tileattn::detail {

// Enqueues the forward pass on `stream` (a cudaStream_t; nullptr = the default stream). No host
// synchronisation, no allocation. CUDA failures are thrown as tileattn::Error with CUDA's message.
// f32 storage runs the f32 kernels (src/cuda/f32/) unless f32_via_bf16 (Context::cuda_f32_via_bf16)
// asks for the bf16 tensor-core kernels.
void cuda_flash_forward(const AttnParams& p, void* stream, bool f32_via_bf16 = false);

// Enqueues the backward pass (dq, dk, dv) on `stream`. No host synchronisation; its workspace
// (f32 accumulators, about 4 x B x Hq x Lq x D bytes; the f32 kernels' 12 bytes per row) is
// `workspace` when given (at least cuda_backward_workspace_bytes(p, f32_via_bf16) bytes,
// 256-byte aligned), else it comes from a stream-ordered pool that the library keeps per device.
// Deterministic mode orders dQ's additions (docs/semantics.md). f32 storage runs the f32 kernels
// unless f32_via_bf16.
void cuda_flash_backward(const AttnBackwardParams& p, void* stream, bool f32_via_bf16 = false,
                         void* workspace = nullptr, std::size_t workspace_bytes = 0);

// The workspace bytes cuda_flash_backward needs for `p`.
std::size_t cuda_backward_workspace_bytes(const AttnBackwardParams& p, bool f32_via_bf16 = false);

// Enqueues merge_attention_states on `stream`; no synchronisation, no allocation.
void cuda_merge_states(const MergeParams& p, void* stream);

}  // namespace tileattn::detail
