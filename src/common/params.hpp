// AttnParams: the validated, backend-neutral description of one attention call.
// Built only by validate_forward() (src/api/validate.cpp); kernels trust it and never re-check.
#pragma once

#include <cstdint>

#include "common/philox.hpp"
#include "tileattn/tileattn.hpp"

namespace tileattn::detail {

inline constexpr std::int64_t kUnbounded = -1;

struct AttnParams {
  // Tensors. Strides are in elements; the innermost (head-dim) stride is 1 for q, k, v, out.
  const void* q = nullptr;       // [B, Lq, Hq, D]
  const void* k = nullptr;       // [B, Lk, Hkv, D]
  const void* v = nullptr;       // [B, Lk, Hkv, Dv]
  void* out = nullptr;           // [B, Lq, Hq, Dv]
  float* lse = nullptr;          // [B, Hq, Lq] or nullptr
  DType dtype = DType::f32;      // storage of q, k, v
  DType out_dtype = DType::f32;  // storage of out
  Device device = Device::cpu;
  int device_index = 0;

  std::int64_t batch = 0, len_q = 0, len_k = 0, heads_q = 0, heads_kv = 0, dim = 0, dim_v = 0;
  std::int64_t heads_per_kv = 1;  // heads_q / heads_kv

  std::int64_t q_stride_b = 0, q_stride_l = 0, q_stride_h = 0;
  std::int64_t k_stride_b = 0, k_stride_l = 0, k_stride_h = 0;
  std::int64_t v_stride_b = 0, v_stride_l = 0, v_stride_h = 0;
  std::int64_t o_stride_b = 0, o_stride_l = 0, o_stride_h = 0;
  std::int64_t lse_stride_b = 0, lse_stride_h = 0, lse_stride_l = 0;

  float scale = 1.0f;
  float softcap = 0.0f;  // 0 = off

  // The causal flag is folded into the window: causal means window_right = min(window_right, 0).
  // kUnbounded (-1) on a side means no limit there.
  std::int64_t window_left = kUnbounded;
  std::int64_t window_right = kUnbounded;
  Alignment alignment = Alignment::bottom_right;

  // Mask broadcast to [B, Hq, Lq, Lk]: stride 0 on broadcast dimensions.
  const void* mask = nullptr;
  DType mask_dtype = DType::boolean;  // boolean (true = attend) or f32 (additive)
  std::int64_t mask_stride_b = 0, mask_stride_h = 0, mask_stride_q = 0, mask_stride_k = 0;

  const void* key_lengths = nullptr;  // i32 or i64 [B], or nullptr
  DType key_lengths_dtype = DType::i32;

  // A packed variable-length batch (varlen): sequence b owns query rows [cu_seqlens_q[b],
  // cu_seqlens_q[b + 1]) of q, out (and lse's columns) and keys [cu_seqlens_k[b],
  // cu_seqlens_k[b + 1]) of k and v, i32 [batch + 1] in the tensors' memory; len_q and len_k are
  // then upper bounds (max_seqlen_q / _k) and the *_stride_b are 0. nullptr: a padded batch.
  // Host backends run each sequence as a batch of one (varlen.hpp: sequence_view).
  const std::int32_t* cu_seqlens_q = nullptr;
  const std::int32_t* cu_seqlens_k = nullptr;
  std::int64_t total_q = 0, total_k = 0;  // varlen: the packed tensors' row counts

  const float* alibi_slopes = nullptr;  // f32, indexed b * alibi_stride_b + h * alibi_stride_h
  std::int64_t alibi_stride_b = 0, alibi_stride_h = 0;

  DropoutParams dropout;  // threshold 0: no dropout

  bool has_dropout() const noexcept { return dropout.threshold != 0; }

  bool is_varlen() const noexcept { return cu_seqlens_q != nullptr; }

  bool has_window() const noexcept {
    return window_left != kUnbounded || window_right != kUnbounded;
  }

  // Valid key length of batch entry b (len_k when no key_lengths are given).
  std::int64_t key_length(std::int64_t b) const noexcept {
    if (key_lengths == nullptr) return len_k;
    return key_lengths_dtype == DType::i32 ? static_cast<const std::int32_t*>(key_lengths)[b]
                                           : static_cast<const std::int64_t*>(key_lengths)[b];
  }

  // Key position of query row i is i + diagonal_offset(b) (see Alignment).
  std::int64_t diagonal_offset(std::int64_t b) const noexcept {
    return alignment == Alignment::bottom_right ? key_length(b) - len_q : 0;
  }

  // ALiBi always uses the bottom-right position i + Lk_b - Lq.
  float alibi_slope(std::int64_t b, std::int64_t h) const noexcept {
    return alibi_slopes == nullptr ? 0.0f : alibi_slopes[b * alibi_stride_b + h * alibi_stride_h];
  }
};

// The backward pass: the forward's description (out and lse are inputs here) plus the incoming
// gradient and the three gradient outputs. Built only by validate_backward().
struct AttnBackwardParams : AttnParams {
  const void* dout = nullptr;  // [B, Lq, Hq, Dv]
  void* dq = nullptr;          // [B, Lq, Hq, D]
  void* dk = nullptr;          // [B, Lk, Hkv, D]
  void* dv = nullptr;          // [B, Lk, Hkv, Dv]
  DType dout_dtype = DType::f32, dq_dtype = DType::f32, dk_dtype = DType::f32,
        dv_dtype = DType::f32;
  std::int64_t do_stride_b = 0, do_stride_l = 0, do_stride_h = 0;
  std::int64_t dq_stride_b = 0, dq_stride_l = 0, dq_stride_h = 0;
  std::int64_t dk_stride_b = 0, dk_stride_l = 0, dk_stride_h = 0;
  std::int64_t dv_stride_b = 0, dv_stride_l = 0, dv_stride_h = 0;
  bool deterministic = false;
};

// The keys visible to query row i (by causal/window/key length alone, before any mask):
// the half-open range [first, last). Empty when first >= last.
struct KeyRange {
  std::int64_t first, last;
};

inline KeyRange visible_keys(const AttnParams& p, std::int64_t b, std::int64_t i) noexcept {
  const std::int64_t klen = p.key_length(b);
  const std::int64_t pos = i + p.diagonal_offset(b);
  std::int64_t first = 0, last = klen;
  if (p.window_left != kUnbounded && pos - p.window_left > first) first = pos - p.window_left;
  if (p.window_right != kUnbounded && pos + p.window_right + 1 < last)
    last = pos + p.window_right + 1;
  if (first > last) first = last;
  if (last < 0) first = last = 0;
  return {first, last};
}

}  // namespace tileattn::detail
