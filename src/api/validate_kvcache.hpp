// Argument checks of attention_with_kvcache and apply_rotary (the serving operators).
#pragma once

#include "common/kvcache_params.hpp"

namespace tileattn::detail {

// Checks every argument and builds the kernel parameters; throws tileattn::Error naming the
// offending argument and touches nothing. Host-resident indices (cache_seqlens, block_table,
// cache_batch_idx, cu_seqlens) are checked against the cache's bounds; device-resident ones are
// clamped by the kernels instead.
KvCacheParams validate_kvcache(const KvCacheArgs& args);

RotaryParams validate_rotary(const RotaryArgs& args);

}  // namespace tileattn::detail
