// CUDA backend entry points of the serving operators (src/api/kvcache.cpp).
#pragma once

#include <cstddef>

#include "common/kvcache_params.hpp"

namespace tileattn::detail {

// Enqueues attention_with_kvcache on `stream`: the append (new keys rotated) and q's rotation
// into a workspace, the split-KV decode kernel over the cache in place, and the combine of the
// splits. No host synchronisation; the workspace is the caller's (`workspace`, at least
// cuda_kvcache_workspace_bytes(p) bytes, 256-byte aligned) or, when null, comes from the
// library's stream-ordered pool. 16-bit storage only (an f32 cache is refused with
// tileattn::Error).
void cuda_attention_with_kvcache(const KvCacheParams& p, void* stream, void* workspace = nullptr,
                                 std::size_t workspace_bytes = 0);

// The workspace bytes cuda_attention_with_kvcache(p, ..) uses: split results and q's rotated copy.
std::size_t cuda_kvcache_workspace_bytes(const KvCacheParams& p);

void cuda_apply_rotary(const RotaryParams& p, void* stream);

}  // namespace tileattn::detail
