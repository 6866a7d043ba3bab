// CUDA backend entry point, called by attention_forward for device tensors (src/api/attention.cpp).
#pragma once

#include "api/params.hpp"

namespace tileattn::detail {

// Enqueues the forward pass on `stream` (a cudaStream_t; nullptr = the default stream). No host
// synchronisation, no allocation. CUDA failures are thrown as tileattn::Error with CUDA's message.
void cuda_flash_forward(const AttnParams& p, void* stream);

}  // namespace tileattn::detail
