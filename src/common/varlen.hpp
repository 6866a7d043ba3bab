// Host backends run a packed variable-length batch as one batch-of-one call per sequence:
// sequence_view(p, b) is the dense description of sequence b, so that every option means on a
// varlen batch exactly what it means on a padded one (positions within the sequence; dropout,
// ALiBi and key_lengths indexed by b).
#pragma once

#include <cstdint>

#include "common/params.hpp"

namespace tileattn::detail {

inline const void* advance(const void* base, DType dtype, std::int64_t elements) {
  return static_cast<const char*>(base) + elements * static_cast<std::int64_t>(size_of(dtype));
}

inline void* advance(void* base, DType dtype, std::int64_t elements) {
  return static_cast<char*>(base) + elements * static_cast<std::int64_t>(size_of(dtype));
}

inline std::int64_t sequence_query_count(const AttnParams& p, std::int64_t b) {
  return std::int64_t{p.cu_seqlens_q[b + 1]} - p.cu_seqlens_q[b];
}

// p must be varlen with host-resident offsets (validate_forward checked them).
inline AttnParams sequence_view(const AttnParams& p, std::int64_t b) {
  AttnParams s = p;
  const std::int64_t q0 = p.cu_seqlens_q[b], k0 = p.cu_seqlens_k[b];
  s.cu_seqlens_q = s.cu_seqlens_k = nullptr;
  s.batch = 1;
  s.len_q = sequence_query_count(p, b);
  s.len_k = std::int64_t{p.cu_seqlens_k[b + 1]} - k0;
  s.q = advance(p.q, p.dtype, q0 * p.q_stride_l);
  s.k = advance(p.k, p.dtype, k0 * p.k_stride_l);
  s.v = advance(p.v, p.dtype, k0 * p.v_stride_l);
  s.out = advance(p.out, p.out_dtype, q0 * p.o_stride_l);
  if (p.lse != nullptr) s.lse = p.lse + q0 * p.lse_stride_l;
  if (p.key_lengths != nullptr) s.key_lengths = advance(p.key_lengths, p.key_lengths_dtype, b);
  if (p.alibi_slopes != nullptr) s.alibi_slopes = p.alibi_slopes + b * p.alibi_stride_b;
  // Philox stream offset + b * Hq + h: batch entry b of the padded batch.
  s.dropout.offset = p.dropout.offset +
                     static_cast<std::uint64_t>(b) * static_cast<std::uint64_t>(p.dropout.heads_q);
  return s;
}

inline AttnBackwardParams sequence_view(const AttnBackwardParams& p, std::int64_t b) {
  AttnBackwardParams s = p;
  static_cast<AttnParams&>(s) = sequence_view(static_cast<const AttnParams&>(p), b);
  const std::int64_t q0 = p.cu_seqlens_q[b], k0 = p.cu_seqlens_k[b];
  s.dout = advance(p.dout, p.dout_dtype, q0 * p.do_stride_l);
  s.dq = advance(p.dq, p.dq_dtype, q0 * p.dq_stride_l);
  s.dk = advance(p.dk, p.dk_dtype, k0 * p.dk_stride_l);
  s.dv = advance(p.dv, p.dv_dtype, k0 * p.dv_stride_l);
  return s;
}

}  // namespace tileattn::detail
