#include "reference/reference_kvcache.hpp"

#include <cstring>
#include <vector>

#include "common/rotary.hpp"
#include "cpu/kvcache_append.hpp"
#include "reference/reference_forward.hpp"

namespace tileattn::detail {

void reference_kvcache(const KvCacheParams& p, int threads) {
  const AttnParams& a = p.attn;
  const CacheLayout& c = p.cache;
  const std::int64_t esize = static_cast<std::int64_t>(size_of(a.dtype));
  const std::int64_t Hq = a.heads_q, Hkv = a.heads_kv, D = a.dim, Dv = a.dim_v;
  std::vector<float> scratch(static_cast<std::size_t>(D));
  for (std::int64_t b = 0; b < a.batch; ++b) {
    AttnParams s = sequence_attention(p, b);
    if (s.len_q == 0) continue;
    // Left padding drops the first keys: attending to the rest alone, bottom-right aligned,
    // keeps every position (and ALiBi distance) of the cache's rows.
    const std::int64_t first = p.key_first(b), Lk = s.len_k - first;
    s.len_k = Lk;
    // One spare row keeps the pointers valid when the sequence has no keys.
    std::vector<char> k(static_cast<std::size_t>((Lk + 1) * Hkv * D * esize));
    std::vector<char> v(static_cast<std::size_t>((Lk + 1) * Hkv * Dv * esize));
    for (std::int64_t j = 0; j < Lk; ++j)
      for (std::int64_t h = 0; h < Hkv; ++h) {
        const std::int64_t blk = c.block(b, first + j), row = c.row(first + j);
        std::memcpy(
            &k[static_cast<std::size_t>((j * Hkv + h) * D * esize)],
            advance(c.k, a.dtype, blk * c.k_stride_blk + row * c.k_stride_row + h * c.k_stride_h),
            static_cast<std::size_t>(D * esize));
        std::memcpy(
            &v[static_cast<std::size_t>((j * Hkv + h) * Dv * esize)],
            advance(c.v, a.dtype, blk * c.v_stride_blk + row * c.v_stride_row + h * c.v_stride_h),
            static_cast<std::size_t>(Dv * esize));
      }
    std::vector<char> q(static_cast<std::size_t>(s.len_q * Hq * D * esize));
    for (std::int64_t i = 0; i < s.len_q; ++i)
      for (std::int64_t h = 0; h < Hq; ++h)
        copy_rotated(advance(s.q, a.dtype, i * a.q_stride_l + h * a.q_stride_h),
                     &q[static_cast<std::size_t>((i * Hq + h) * D * esize)], a.dtype, D, p.rotary,
                     rotary_query_position(p, b, i), scratch.data());
    s.q = q.data();
    s.q_stride_b = s.len_q * Hq * D, s.q_stride_l = Hq * D, s.q_stride_h = D;
    s.k = k.data();
    s.k_stride_b = Lk * Hkv * D, s.k_stride_l = Hkv * D, s.k_stride_h = D;
    s.v = v.data();
    s.v_stride_b = Lk * Hkv * Dv, s.v_stride_l = Hkv * Dv, s.v_stride_h = Dv;
    reference_forward(s, threads);
  }
}

}  // namespace tileattn::detail
