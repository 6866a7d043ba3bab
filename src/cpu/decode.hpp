#pragma once
#include "common/kvcache_params.hpp"

namespace tileattn::detail {
// Attention of each sequence's queries over its key_count(b) cached keys on the CPU (the append
// has been done): work items of (sequence, kv head, query rows, key split) run the decode kernel
// on the cache in place; splits are merged by their lse.
void cpu_kvcache_attention(const KvCacheParams& p, int threads, CpuIsa isa_cap);
}  // namespace tileattn::detail
