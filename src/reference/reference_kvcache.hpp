#pragma once
#include "common/kvcache_params.hpp"

namespace tileattn::detail {
// The oracle of attention_with_kvcache (after the append): each sequence's keys gathered from the
// cache into a plain buffer, its queries rotated into a copy, then reference_forward.
void reference_kvcache(const KvCacheParams& p, int threads);
}  // namespace tileattn::detail
