// Host halves of the serving operators that move rows rather than attend: the KV-cache append
// (with the new keys' rotary embedding) and apply_rotary.
#pragma once

#include <cstdint>

#include "common/kvcache_params.hpp"

namespace tileattn::detail {

// Writes k_new / v_new into the cache at rows cache_seqlens[b] .. + Lnew_b - 1 of each sequence,
// rotating the keys when p.rotary is present.
void cpu_kvcache_append(const KvCacheParams& p, int threads);

void cpu_apply_rotary(const RotaryParams& p, int threads);

// The rotary position of query row i of sequence b (KvCacheArgs' convention).
inline std::int64_t rotary_query_position(const KvCacheParams& p, std::int64_t b,
                                          std::int64_t i) noexcept {
  return p.cache_seqlens[b] + (p.rotary_q_per_row ? i : 0);
}

}  // namespace tileattn::detail
