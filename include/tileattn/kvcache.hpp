// tileattn serving operators: attention over a KV cache (contiguous or paged) with in-place
// append and rotary embeddings, and the rotary embedding on its own. Included by tileattn.hpp;
// docs/semantics.md ("KV cache" and "Rotary embeddings") is the normative description.
#pragma once

#include <cstdint>
#include <optional>

#include "tileattn/tileattn.hpp"

namespace tileattn {

// Rotary position embedding (RoPE) of the first rotary_dim = 2 * cos.shape[1] elements of each
// head vector; the rest pass through unchanged. Position p rotates pair i, (x_a, x_b), by the
// angle whose cosine and sine are cos[p, i] and sin[p, i]:
//   x_a' = x_a cos - x_b sin,   x_b' = x_a sin + x_b cos
// with pair i = (2i, 2i + 1) when interleaved (GPT-J) and (i, i + rotary_dim / 2) otherwise
// (GPT-NeoX, half-split). The arithmetic is f32; results are rounded to the output's dtype.
struct RotaryArgs {
  // x [B, L, H, D] or, with cu_seqlens, [total, H, D]; f32 | f16 | bf16, last dim contiguous.
  // out has x's shape and dtype; out may be x itself (the same view: rotated in place); any
  // other overlap with an input is refused.
  Tensor x, out;
  // cos, sin [max_position, rotary_dim / 2], f32 or x's dtype, rotary_dim <= D and even.
  Tensor cos, sin;
  bool interleaved = false;
  // Row l of sequence b sits at position seqlen_offsets[b] + l (i32 [B]; absent: 0). Every
  // position must be below max_position (checked for host tensors; on CUDA a position beyond
  // the table leaves its row unrotated, so keep it in range).
  Tensor seqlen_offsets;
  // Optional varlen batch: i32 [B + 1] offsets of each sequence's rows in x (as AttentionArgs).
  Tensor cu_seqlens;
};

void apply_rotary(const RotaryArgs& args, const Context& ctx = {});

// Attention of new queries over a KV cache, FlashAttention's flash_attn_with_kvcache:
//   1. when k_new / v_new are given, they are written into the cache in place at rows
//      cache_seqlens[b] .. cache_seqlens[b] + Lnew - 1 of sequence b (into the right pages),
//      the keys rotated first when rotary_cos / rotary_sin are given;
//   2. q (rotated too, into a private copy: q itself is never written) attends to the
//      cache_seqlens[b] + Lnew keys of sequence b, with the options of attention_forward.
// Keys are positioned as in attention_forward with bottom_right alignment: query row i of a
// sequence with Lq rows and Lk = cache_seqlens[b] + Lnew keys sits at key position
// Lk - Lq + i. Rows of the cache at or beyond Lk (pages never written included) are never read
// and may hold any bits. cache_seqlens is not updated: the caller advances it.
struct KvCacheArgs {
  // q [B, Lq, Hq, D], or [total_q, Hq, D] with cu_seqlens_q; f32 | f16 | bf16.
  Tensor q;
  // The cache, q's dtype, last dim contiguous. Contiguous: k_cache [B_cache, Lmax, Hkv, D],
  // v_cache [B_cache, Lmax, Hkv, Dv]; sequence b uses entry cache_batch_idx[b] (default b).
  // Paged (block_table given): k_cache [num_blocks, block_size, Hkv, D], v_cache likewise;
  // key j of sequence b is row j % block_size of block block_table[b, j / block_size].
  Tensor k_cache, v_cache;
  Tensor block_table;      // i32 [B, max_blocks_per_sequence]; present = paged
  Tensor cache_batch_idx;  // i32 [B], contiguous caches only; entries distinct when appending
  // i32 [B]: keys already in the cache for each sequence (before the append). Required.
  Tensor cache_seqlens;
  // Optional i32 [B]: left padding. Keys j < cache_leftpad[b] of sequence b are not attended
  // (rows that may hold anything); positions, alignment, ALiBi distances and rotary positions
  // stay those of the cache's rows, as in FlashAttention. 0 <= cache_leftpad[b] <= Lk.
  Tensor cache_leftpad;
  // Optional new keys and values, q's dtype: [B, Lnew, Hkv, D] / [B, Lnew, Hkv, Dv], or with
  // cu_seqlens_q, [total_new, Hkv, D] with cu_seqlens_k_new (i32 [B + 1]) giving each
  // sequence's rows. The cache must have room: cache_seqlens[b] + Lnew_b <= capacity (Lmax, or
  // max_blocks_per_sequence * block_size), and distinct sequences must not share the pages
  // written.
  Tensor k_new, v_new;
  Tensor cu_seqlens_k_new;
  // Optional rotary embedding (RotaryArgs' conventions) applied to q and to the new keys. New
  // key t of sequence b sits at position cache_seqlens[b] + t. Query row i sits at position
  // cache_seqlens[b] + i with causal masking or a window, else every row at cache_seqlens[b]
  // (FlashAttention's convention).
  Tensor rotary_cos, rotary_sin;
  bool rotary_interleaved = false;

  // out [B, Lq, Hq, Dv] (or [total_q, Hq, Dv]) f32 | f16 | bf16; lse f32 [B, Hq, Lq] (or
  // [Hq, total_q]), optional. Neither may overlap any input.
  Tensor out, lse;

  std::optional<float> scale;  // as AttentionArgs::scale
  bool causal = false;         // bottom-right aligned
  std::int64_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  Tensor alibi_slopes;  // f32 [Hq] or [B, Hq]

  // Varlen queries (chunked prefill, speculative verification): i32 [B + 1] row offsets of
  // each sequence in q, and the largest sequence's row count.
  Tensor cu_seqlens_q;
  std::int64_t max_seqlen_q = 0;

  // How many parts each sequence's keys are split into (computed in parallel, merged by lse).
  // 0: the library decides. Results agree across split counts up to rounding.
  int num_splits = 0;
};

void attention_with_kvcache(const KvCacheArgs& args, const Context& ctx = {});

// The device bytes attention_with_kvcache(args, ctx) needs in Context::cuda_workspace (split
// results, a rotated copy of q): 0 when the call needs none or runs on a host backend.
// Validates the arguments as attention_with_kvcache does (same errors).
std::size_t attention_with_kvcache_workspace_bytes(const KvCacheArgs& args,
                                                   const Context& ctx = {});

}  // namespace tileattn
