// The f32 backward's per-row kernels, before and after the gradient kernels (one warp per
// (b, h, i) row, rows in [B, Hq, Lq] order):
//  - prepare: delta = rowsum(dO o O) in f32, the given lse copied compact, and kRowBad for a row
//    whose q, dout or out holds a non-finite element or whose lse is NaN or +inf (such a row
//    takes no part in the gradient kernels);
//  - poison: for every flagged row (kRowBad, or kRowLate from the gradient kernels) that sees at
//    least one key, NaN to its dq and to the dk and dv of every key it sees (docs/semantics.md,
//    "Non-finite values"). Rows are rarely flagged, so this costs one flag read per row.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/elements.cuh"
#include "cuda/common/tile_coords.cuh"
#include "cuda/f32/f32_params.hpp"
#include "cuda/f32/f32_scores.cuh"

namespace tileattn::cuda::f32 {

inline constexpr int kRowWarps = 8;  // rows per CTA of the per-row kernels

// A workspace row (b, h, i) and row i's place in the tensors (tensor_row: a varlen sequence's
// rows start at its q0); false for a row past the batch entry's (or sequence's) query count.
struct RowIndex {
  std::int64_t row, tensor_row;
  int b, h, i;
};

__device__ __forceinline__ bool row_index(const FlashFwdParams& p, RowIndex& r) {
  r.row = static_cast<std::int64_t>(blockIdx.x) * kRowWarps + threadIdx.x / 32;
  if (r.row >= static_cast<std::int64_t>(p.batch) * p.heads_q * p.len_q) return false;
  r.i = static_cast<int>(r.row % p.len_q);
  const auto bh = static_cast<int>(r.row / p.len_q);
  r.h = bh % p.heads_q;
  r.b = bh / p.heads_q;
  const SequenceRows seq = sequence_rows(p, r.b);
  r.tensor_row = seq.q0 + r.i;
  return r.i < seq.len_q;
}

__global__ void __launch_bounds__(kRowWarps * 32)
    f32_bwd_prepare_kernel(const __grid_constant__ F32BwdParams p) {
  RowIndex r;
  if (!row_index(p, r)) return;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const std::int64_t out_esize = p.out_type == ElemType::f32 ? 4 : 2;
  const std::int64_t do_esize = p.dout_type == ElemType::f32 ? 4 : 2;
  const char* out =
      static_cast<const char*>(p.out) +
      (r.b * p.o_stride_b + r.h * p.o_stride_h + r.tensor_row * p.o_stride_l) * out_esize;
  const char* dout =
      static_cast<const char*>(p.dout) +
      (r.b * p.do_stride_b + r.h * p.do_stride_h + r.tensor_row * p.do_stride_l) * do_esize;
  const char* q = static_cast<const char*>(p.q) +
                  (r.b * p.q_stride_b + r.h * p.q_stride_h + r.tensor_row * p.q_stride_l) * 4;
  bool bad = false;
  float delta = 0.0f;
  for (int c = lane; c < p.dim_v; c += 32) {
    const float o = load_elem(out, c, p.out_type), d = load_elem(dout, c, p.dout_type);
    bad = bad || !isfinite(o) || !isfinite(d);
    delta = fmaf(o, d, delta);
  }
  for (int c = lane; c < p.dim; c += 32) bad = bad || !isfinite(load_elem(q, c, ElemType::f32));
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    delta += __shfl_xor_sync(0xffffffffu, delta, offset);
  bad = __any_sync(0xffffffffu, bad);
  const float lse =
      p.lse[r.b * p.lse_stride_b + r.h * p.lse_stride_h + r.tensor_row * p.lse_stride_l];
  bad = bad || isnan(lse) || lse == INFINITY;
  if (lane == 0) {
    p.lse_rows[r.row] = lse;
    p.delta_rows[r.row] = bad ? 0.0f : delta;
    p.row_flags[r.row] = bad ? kRowBad : 0;
  }
}

__global__ void __launch_bounds__(kRowWarps * 32)
    f32_bwd_poison_kernel(const __grid_constant__ F32BwdParams p) {
  RowIndex r;
  if (!row_index(p, r) || p.row_flags[r.row] == 0) return;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const TileCoords t = tile_coords_at<1>(p, r.i, r.b * p.heads_q + r.h);
  const ScoreRow row = score_row(p, t, r.i);
  const std::int64_t dk_esize = p.dk_type == ElemType::f32 ? 4 : 2;
  const std::int64_t dv_esize = p.dv_type == ElemType::f32 ? 4 : 2;
  const std::int64_t dq_esize = p.dq_type == ElemType::f32 ? 4 : 2;
  bool any = false;
  for (int j = row.first + lane; j < row.last; j += 32) {
    if (!key_visible(p, row, j)) continue;
    any = true;
    const std::int64_t key_row = t.k0 + j;
    char* dk = static_cast<char*>(p.dk) +
               (r.b * p.dk_stride_b + t.hk * p.dk_stride_h + key_row * p.dk_stride_l) * dk_esize;
    char* dv = static_cast<char*>(p.dv) +
               (r.b * p.dv_stride_b + t.hk * p.dv_stride_h + key_row * p.dv_stride_l) * dv_esize;
    for (int c = 0; c < p.dim; ++c) store_elem(dk, c, p.dk_type, NAN);
    for (int c = 0; c < p.dim_v; ++c) store_elem(dv, c, p.dv_type, NAN);
  }
  if (!__any_sync(0xffffffffu, any)) return;
  char* dq = static_cast<char*>(p.dq) +
             (r.b * p.dq_stride_b + r.h * p.dq_stride_h + r.tensor_row * p.dq_stride_l) * dq_esize;
  for (int c = lane; c < p.dim; c += 32) store_elem(dq, c, p.dq_type, NAN);
}

}  // namespace tileattn::cuda::f32
