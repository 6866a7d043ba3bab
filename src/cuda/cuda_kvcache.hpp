// CUDA backend entry points of the serving operators (src/api/kvcache.cpp).
#pragma once

#include "common/kvcache_params.hpp"

namespace tileattn::detail {

// Enqueues attention_with_kvcache on `stream`: the append (new keys rotated) and q's rotation
// into a workspace, the split-KV decode kernel over the cache in place, and the combine of the
// splits. No host synchronisation; the workspace comes from the library's stream-ordered pool.
// 16-bit storage only (an f32 cache is refused with tileattn::Error).
void cuda_attention_with_kvcache(const KvCacheParams& p, void* stream);

void cuda_apply_rotary(const RotaryParams& p, void* stream);

}  // namespace tileattn::detail
