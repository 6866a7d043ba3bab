// The device-side description of one attention_with_kvcache call (built by kvcache.cu from
// KvCacheParams): where the queries, the cache and the split results live.
#pragma once

#include <cstdint>

#include "cuda/common/fast_divmod.hpp"
#include "cuda/common/flash_fwd_params.hpp"

namespace tileattn::cuda {

// Query rows per CTA: one m16 tile of (query row, head of the kv group) pairs.
inline constexpr int kDecodeRows = 16;

struct DecodeParams {
  ElemType in_type;
  bool vector_loads;    // 16-byte cp.async K/V rows (aligned, head dims multiples of 8)
  bool vector_loads_q;  // the same for q's rows

  // q [B, Lq, Hq, D] (q_stride_b 0 and cu_seqlens_q for varlen rows).
  const void* q;
  std::int64_t q_stride_b, q_stride_l, q_stride_h;
  const std::int32_t* cu_seqlens_q;
  int len_q;  // rows per sequence of a padded batch

  // The cache: key j of sequence b is row `row` of block `blk` (CacheLayout's rule).
  const void* k;
  const void* v;
  std::int64_t k_stride_blk, k_stride_row, k_stride_h;
  std::int64_t v_stride_blk, v_stride_row, v_stride_h;
  const std::int32_t* block_table;  // nullptr: contiguous
  std::int64_t block_table_stride;
  int block_size;  // paged block size; contiguous: the capacity Lmax
  FastDivmod block_div;
  int num_blocks;
  const std::int32_t* batch_idx;
  const std::int32_t* cache_seqlens;
  const std::int32_t* cache_leftpad;  // nullptr: none
  const std::int32_t* cu_seqlens_k_new;
  int len_new;
  int capacity;

  int batch, heads_kv, group, dim, dim_v;
  FastDivmod group_div, dim_v_div;  // by group and dim_v
  float scale, scale_log2, softcap;
  const float* alibi;  // nullptr: off
  std::int64_t alibi_stride_b, alibi_stride_h;
  int window_left, window_right;  // -1: unbounded

  int row_tiles;  // kDecodeRows-row tiles per (sequence, kv head)
  int splits;     // key splits per tile: each takes an equal share of the sequence's key blocks

  // The result (one split: the kernel writes it; several: the combine does): out [B, Lq, Hq,
  // Dv] (o_stride_b 0 for varlen rows), lse [B, Hq, Lq] natural-log (nullptr: not wanted).
  void* out;
  ElemType out_type;
  std::int64_t o_stride_b, o_stride_l, o_stride_h;
  float* lse;
  std::int64_t lse_stride_b, lse_stride_h, lse_stride_l;

  // Split results (several splits): rows ((((b * heads_kv + h) * row_tiles + tile) * splits +
  // split) * 16 + r) of dim_v floats, normalised, and their natural-log lse (-inf: no key; NaN:
  // poisoned); rows past the sequence's queries are neither written nor read.
  float* part_out;
  float* part_lse;
};

__host__ __device__ inline int query_count(const DecodeParams& p, int b) {
  return p.cu_seqlens_q != nullptr ? p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b] : p.len_q;
}
__host__ __device__ inline int new_count(const DecodeParams& p, int b) {
  if (p.cu_seqlens_k_new != nullptr) return p.cu_seqlens_k_new[b + 1] - p.cu_seqlens_k_new[b];
  return p.len_new;
}
// Keys sequence b attends to, clamped into the cache (device indices are not validated).
__host__ __device__ inline int key_count(const DecodeParams& p, int b) {
  const int n = p.cache_seqlens[b] + new_count(p, b);
  return n < 0 ? 0 : (n > p.capacity ? p.capacity : n);
}

}  // namespace tileattn::cuda
