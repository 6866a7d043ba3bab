// KvCacheParams and RotaryParams: the validated descriptions of attention_with_kvcache and
// apply_rotary (built only by src/api/validate_kvcache.cpp; kernels trust them).
#pragma once

#include <cstdint>

#include "common/params.hpp"
#include "common/varlen.hpp"

namespace tileattn::detail {

// A rotary table and how it is applied (RotaryArgs' conventions). dim = 0: no rotation.
struct RotaryTable {
  const void* cos = nullptr;
  const void* sin = nullptr;
  DType dtype = DType::f32;
  std::int64_t cos_stride = 0, sin_stride = 0;  // between positions, in elements
  std::int64_t dim = 0;                         // rotary_dim (even, <= D)
  std::int64_t positions = 0;                   // rows of the table
  bool interleaved = false;

  bool present() const noexcept { return dim > 0; }
};

struct RotaryParams {
  const void* x = nullptr;
  void* out = nullptr;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  int device_index = 0;
  std::int64_t batch = 0, len = 0, heads = 0, dim = 0;  // varlen: len = total rows, batch = B
  std::int64_t x_stride_b = 0, x_stride_l = 0, x_stride_h = 0;
  std::int64_t o_stride_b = 0, o_stride_l = 0, o_stride_h = 0;
  RotaryTable table;
  const std::int32_t* seqlen_offsets = nullptr;  // [batch] or nullptr
  const std::int32_t* cu_seqlens = nullptr;      // [batch + 1] or nullptr
  bool in_place() const noexcept { return x == out; }
};

// Where a KV cache keeps its rows. Key j of sequence b is row `row(b, j)` of "block"
// `block(b, j)`: for a paged cache the block_table's page and j % block_size; for a contiguous
// cache (block_size = Lmax) the sequence's cache entry and j itself.
struct CacheLayout {
  void* k = nullptr;  // k_cache
  void* v = nullptr;  // v_cache
  std::int64_t k_stride_blk = 0, k_stride_row = 0, k_stride_h = 0;
  std::int64_t v_stride_blk = 0, v_stride_row = 0, v_stride_h = 0;
  std::int64_t block_size = 0;                // paged: block_size; contiguous: Lmax
  std::int64_t num_blocks = 0;                // paged: blocks in the pool; contiguous: B_cache
  const std::int32_t* block_table = nullptr;  // [B, max_blocks] (paged) or nullptr
  std::int64_t block_table_stride = 0, max_blocks = 0;
  const std::int32_t* batch_idx = nullptr;  // contiguous only, [B] or nullptr

  bool paged() const noexcept { return block_table != nullptr; }
  // Keys a sequence may hold.
  std::int64_t capacity() const noexcept { return paged() ? max_blocks * block_size : block_size; }
  // Host only: the cache block holding key j of sequence b, and the row within it.
  std::int64_t block(std::int64_t b, std::int64_t j) const noexcept {
    if (paged()) return block_table[b * block_table_stride + j / block_size];
    return batch_idx != nullptr ? batch_idx[b] : b;
  }
  std::int64_t row(std::int64_t j) const noexcept { return paged() ? j % block_size : j; }
};

struct KvCacheParams {
  // q, out, lse, the dims and the options, as attention_forward would see them (k, v and
  // key_lengths unset; len_k = the cache's capacity; varlen queries set cu_seqlens_q only).
  AttnParams attn;
  CacheLayout cache;
  const std::int32_t* cache_seqlens = nullptr;  // [B]
  const std::int32_t* cache_leftpad = nullptr;  // [B] or nullptr: keys below are not attended

  // New keys and values: [B, Lnew, Hkv, D] or varlen rows given by cu_seqlens_k_new.
  const void* k_new = nullptr;
  const void* v_new = nullptr;
  std::int64_t len_new = 0;  // Lnew (padded), or total_new (varlen)
  std::int64_t kn_stride_b = 0, kn_stride_l = 0, kn_stride_h = 0;
  std::int64_t vn_stride_b = 0, vn_stride_l = 0, vn_stride_h = 0;
  const std::int32_t* cu_seqlens_k_new = nullptr;

  RotaryTable rotary;
  bool rotary_q_per_row = false;  // causal or window: row i at cache_seqlens[b] + i

  int num_splits = 0;

  bool has_new() const noexcept { return k_new != nullptr; }
  // Host only: the new keys of sequence b and where its rows start in k_new / v_new.
  std::int64_t new_count(std::int64_t b) const noexcept {
    if (!has_new()) return 0;
    if (cu_seqlens_k_new != nullptr)
      return std::int64_t{cu_seqlens_k_new[b + 1]} - cu_seqlens_k_new[b];
    return len_new;
  }
  std::int64_t new_first_row(std::int64_t b) const noexcept {
    return cu_seqlens_k_new != nullptr ? cu_seqlens_k_new[b] : 0;
  }
  // Host only: keys sequence b attends to (after the append).
  std::int64_t key_count(std::int64_t b) const noexcept { return cache_seqlens[b] + new_count(b); }
  // Host only: the first key sequence b attends to (its left padding).
  std::int64_t key_first(std::int64_t b) const noexcept {
    return cache_leftpad != nullptr ? cache_leftpad[b] : 0;
  }
  // Host only: query rows of sequence b and the first of them in q.
  std::int64_t query_count(std::int64_t b) const noexcept {
    return attn.is_varlen() ? std::int64_t{attn.cu_seqlens_q[b + 1]} - attn.cu_seqlens_q[b]
                            : attn.len_q;
  }
  std::int64_t query_first_row(std::int64_t b) const noexcept {
    return attn.is_varlen() ? attn.cu_seqlens_q[b] : 0;
  }
};

// Host only: sequence b's queries as a batch-of-one attention call over its key_count(b) keys
// (q, out, lse and ALiBi offset to the sequence; k, v and their strides left for the caller).
inline AttnParams sequence_attention(const KvCacheParams& p, std::int64_t b) {
  const AttnParams& a = p.attn;
  AttnParams s = a;
  const std::int64_t row0 = p.query_first_row(b);
  s.cu_seqlens_q = nullptr;
  s.batch = 1;
  s.len_q = p.query_count(b);
  s.len_k = p.key_count(b);
  s.q = advance(a.q, a.dtype, b * a.q_stride_b + row0 * a.q_stride_l);
  s.out = advance(a.out, a.out_dtype, b * a.o_stride_b + row0 * a.o_stride_l);
  if (a.lse != nullptr) s.lse = a.lse + b * a.lse_stride_b + row0 * a.lse_stride_l;
  if (a.alibi_slopes != nullptr) s.alibi_slopes = a.alibi_slopes + b * a.alibi_stride_b;
  return s;
}

}  // namespace tileattn::detail
