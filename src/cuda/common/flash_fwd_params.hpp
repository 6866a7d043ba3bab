// The kernel's view of one attention call: AttnParams flattened to what the device code reads,
// passed by value as a __grid_constant__ parameter. Built on the host by make_flash_fwd_params.
#pragma once

#include <cstdint>
#include <numbers>

namespace tileattn::cuda {

inline constexpr float kLog2e = std::numbers::log2e_v<float>;
inline constexpr float kLn2 = std::numbers::ln2_v<float>;

enum class ElemType : std::uint8_t { f32, f16, bf16 };

struct FlashFwdParams {
  const void* q;  // [B, Lq, Hq, D]
  const void* k;  // [B, Lk, Hkv, D]
  const void* v;  // [B, Lk, Hkv, Dv]
  void* out;      // [B, Lq, Hq, Dv]
  float* lse;     // [B, Hq, Lq] or nullptr

  std::int64_t q_stride_b, q_stride_l, q_stride_h;
  std::int64_t k_stride_b, k_stride_l, k_stride_h;
  std::int64_t v_stride_b, v_stride_l, v_stride_h;
  std::int64_t o_stride_b, o_stride_l, o_stride_h;
  std::int64_t lse_stride_b, lse_stride_h, lse_stride_l;

  int batch, len_q, len_k, heads_q, heads_per_kv, dim, dim_v;
  int num_m_blocks;  // ceil(len_q / block_m)

  ElemType in_type;   // storage of q, k, v: the kernel's operand type, or f32 (converted on load)
  ElemType out_type;  // storage of out
  bool vector_loads;  // 16-byte cp.async tile loads are legal (alignment, strides, D % 8 == 0)
  bool pair_stores;   // out: pairs of elements at even columns may be stored as one (alignment)
  bool
      vector_stores;  // out: 16-byte stores of 8 elements are legal (out type = in type, alignment)

  // Fast path: scores are multiplied by scale * log2(e) and the softmax runs in base 2.
  float scale;
  float scale_log2;
  float softcap;  // 0 = off (general path only)

  // Visible keys of query i (key position pos = i + offset): [pos - window_left, pos +
  // window_right], each side unbounded when negative; offset = Lk_b - Lq (bottom-right) or 0.
  std::int64_t window_left, window_right;
  bool bottom_right;

  const void* key_lengths;  // i32 / i64 [B] on the device, clamped into [0, Lk]; or nullptr
  bool key_lengths_i64;

  // A packed varlen batch (tile_coords.cuh: sequence_rows): sequence b owns rows
  // [cu_seqlens_q[b], cu_seqlens_q[b + 1]) of q, out, lse (and dout, dq) and
  // [cu_seqlens_k[b], cu_seqlens_k[b + 1]) of k, v (and dk, dv), i32 [B + 1] on the device;
  // len_q / len_k are then the maxima and every *_stride_b is 0; total_q / total_k: the tensors'
  // row counts, which bound every sequence (the offsets are read on the device, unchecked).
  // nullptr: a padded batch.
  const std::int32_t* cu_seqlens_q;
  const std::int32_t* cu_seqlens_k;
  int total_q, total_k;

  // General path only: boolean (true = attend) or additive f32 mask, broadcast via 0 strides.
  const void* mask;
  bool mask_additive;
  std::int64_t mask_stride_b, mask_stride_h, mask_stride_q, mask_stride_k;

  const float* alibi_slopes;  // or nullptr
  std::int64_t alibi_stride_b, alibi_stride_h;

  // General path only: dropout on the probabilities, the decision of src/common/philox.hpp
  // (threshold 0: off); kept probabilities are multiplied by keep_scale.
  std::uint64_t dropout_seed, dropout_offset;
  std::uint32_t dropout_threshold;
  float dropout_keep_scale;
};

}  // namespace tileattn::cuda
