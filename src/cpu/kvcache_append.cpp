#include "cpu/kvcache_append.hpp"

#include <cstring>
#include <vector>

#include "common/rotary.hpp"
#include "common/threads.hpp"
#include "common/varlen.hpp"

namespace tileattn::detail {

void cpu_kvcache_append(const KvCacheParams& p, int threads) {
  const CacheLayout& c = p.cache;
  const std::int64_t heads = p.attn.heads_kv,
                     esize = static_cast<std::int64_t>(size_of(p.attn.dtype));
  const std::int64_t B = p.attn.batch;
#pragma omp parallel num_threads(resolve_threads(threads))
  {
    std::vector<float> scratch(static_cast<std::size_t>(p.attn.dim));
#pragma omp for schedule(static)
    for (std::int64_t b = 0; b < B; ++b) {
      const std::int64_t first = p.new_first_row(b), start = p.cache_seqlens[b];
      for (std::int64_t t = 0; t < p.new_count(b); ++t) {
        const std::int64_t j = start + t, blk = c.block(b, j), row = c.row(j);
        for (std::int64_t h = 0; h < heads; ++h) {
          const void* k_src =
              advance(p.k_new, p.attn.dtype,
                      b * p.kn_stride_b + (first + t) * p.kn_stride_l + h * p.kn_stride_h);
          void* k_dst = advance(c.k, p.attn.dtype,
                                blk * c.k_stride_blk + row * c.k_stride_row + h * c.k_stride_h);
          if (p.rotary.present())
            copy_rotated(k_src, k_dst, p.attn.dtype, p.attn.dim, p.rotary, j, scratch.data());
          else
            std::memcpy(k_dst, k_src, static_cast<std::size_t>(p.attn.dim * esize));
          const void* v_src =
              advance(p.v_new, p.attn.dtype,
                      b * p.vn_stride_b + (first + t) * p.vn_stride_l + h * p.vn_stride_h);
          void* v_dst = advance(c.v, p.attn.dtype,
                                blk * c.v_stride_blk + row * c.v_stride_row + h * c.v_stride_h);
          std::memcpy(v_dst, v_src, static_cast<std::size_t>(p.attn.dim_v * esize));
        }
      }
    }
  }
}

void cpu_apply_rotary(const RotaryParams& p, int threads) {
  const std::int64_t B = p.batch;
#pragma omp parallel num_threads(resolve_threads(threads))
  {
    std::vector<float> scratch(static_cast<std::size_t>(p.dim));
#pragma omp for schedule(static)
    for (std::int64_t b = 0; b < B; ++b) {
      const std::int64_t first = p.cu_seqlens != nullptr ? p.cu_seqlens[b] : 0;
      const std::int64_t rows =
          p.cu_seqlens != nullptr ? std::int64_t{p.cu_seqlens[b + 1]} - first : p.len;
      const std::int64_t pos0 = p.seqlen_offsets != nullptr ? p.seqlen_offsets[b] : 0;
      for (std::int64_t l = 0; l < rows; ++l)
        for (std::int64_t h = 0; h < p.heads; ++h) {
          const void* src = advance(
              p.x, p.dtype, b * p.x_stride_b + (first + l) * p.x_stride_l + h * p.x_stride_h);
          void* dst = advance(p.out, p.dtype,
                              b * p.o_stride_b + (first + l) * p.o_stride_l + h * p.o_stride_h);
          copy_rotated(src, dst, p.dtype, p.dim, p.table, pos0 + l, scratch.data());
        }
    }
  }
}

}  // namespace tileattn::detail
