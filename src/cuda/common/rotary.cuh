// The rotary embedding on the device, with the host's arithmetic (src/common/rotary.hpp): each
// product and sum rounded to f32 on its own (no FMA contraction), so a rotated key in the cache
// has the same bits whichever backend appended it.
#pragma once

#include <cstdint>

#include "common/kvcache_params.hpp"
#include "cuda/common/elements.cuh"

namespace tileattn::cuda {

__device__ __forceinline__ ElemType elem_of(DType d) {
  return d == DType::f32 ? ElemType::f32 : d == DType::f16 ? ElemType::f16 : ElemType::bf16;
}

// Pair i of a head vector (i < table.dim / 2): its two element indices.
__device__ __forceinline__ void rotary_pair(const detail::RotaryTable& table, int i, int& ia,
                                            int& ib) {
  const int half = static_cast<int>(table.dim / 2);
  ia = table.interleaved ? 2 * i : i;
  ib = table.interleaved ? 2 * i + 1 : i + half;
}

// Work item `item` of rotating one head vector from src to dst (elements of `type`; src may be
// dst): items below dim/2 are the rotated pairs, the rest copy the elements past rotary_dim.
// A position beyond the table leaves the vector unrotated (device positions are not validated).
__device__ __forceinline__ void rotate_item(const char* src, char* dst, ElemType type,
                                            const detail::RotaryTable& table, std::int64_t pos,
                                            int dim, int item) {
  const int half = static_cast<int>(table.dim / 2);
  const bool rotate = table.dim > 0 && pos >= 0 && pos < table.positions;
  if (item < half) {
    int ia, ib;
    rotary_pair(table, item, ia, ib);
    float a = load_elem(src, ia, type), b = load_elem(src, ib, type);
    if (rotate) {
      const ElemType tt = elem_of(table.dtype);
      const float c =
          load_elem(static_cast<const char*>(table.cos), pos * table.cos_stride + item, tt);
      const float s =
          load_elem(static_cast<const char*>(table.sin), pos * table.sin_stride + item, tt);
      const float ra = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
      const float rb = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
      a = ra;
      b = rb;
    }
    store_elem(dst, ia, type, a);
    store_elem(dst, ib, type, b);
  } else {
    const int d = static_cast<int>(table.dim) + (item - half);
    if (d < dim && src != dst) store_elem(dst, d, type, load_elem(src, d, type));
  }
}

// Items per head vector: pairs plus the pass-through elements.
__host__ __device__ inline int rotate_items(const detail::RotaryTable& table, int dim) {
  return static_cast<int>(table.dim / 2) + dim - static_cast<int>(table.dim);
}

}  // namespace tileattn::cuda
