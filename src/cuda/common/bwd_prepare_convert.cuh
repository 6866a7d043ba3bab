// The first and last kernels of every CUDA backward call (the sm80 and the sm90 main kernels
// share them):
//   flash_bwd_prepare     per workspace row (b, h, i): delta = rowsum(dO o O) and lse * log2(e)
//                         (row_stats: +inf for a row with no visible key, so that its
//                         recomputed probabilities are 0, NaN for a poisoned row; rows past
//                         the batch entry's (varlen: the sequence's) length: delta 0, +inf);
//                         and zeroes
//                         the row's dq_accum_cols floats of dq_accum (by position: together
//                         the rows cover the workspace whatever its layout).
//   flash_bwd_convert_dq  dq = scale * workspace, in dq's dtype and layout.
// Both are memory-bound passes over B x Lq x H rows, so their cost does not shrink with the
// sequence length as the main kernel's share does: at L = 2048 (16k tokens x 2048 channels)
// scalar versions take about a quarter of the call. The fast paths move 16 bytes per load and
// store.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/common/dq_layout.cuh"
#include "cuda/common/elements.cuh"
#include "cuda/common/flash_bwd_params.hpp"
#include "cuda/common/tile_coords.cuh"

namespace tileattn::cuda {

inline constexpr int kPrepareRowsPerBlock = 8;  // flash_bwd_prepare_rows: a warp per row
inline constexpr int kAuxThreads = 256;  // flash_bwd_prepare_vectors and flash_bwd_convert_dq

// Rows of the workspace region one flash_bwd_convert_dq CTA stages in shared memory: 64 (the
// sm90 tiled layout's block), 32 for the 256 bucket (64 x 260 floats would not fit the static
// 48 KB).
constexpr int convert_region_rows(int bucket) {
  return bucket > 128 ? 32 : 64;
}

template <typename T>
__device__ __forceinline__ float rounded(float x) {
  if constexpr (std::is_same_v<T, __half>)
    return __half2float(__float2half_rn(x));
  else
    return __bfloat162float(__float2bfloat16_rn(x));
}

template <typename T>
__device__ __forceinline__ float to_float(T x) {
  if constexpr (std::is_same_v<T, __half>)
    return __half2float(x);
  else
    return __bfloat162float(x);
}

// The workspace row's (b, h, i), whether row i exists (i below the entry's query count), its
// row in the tensors (a varlen sequence's rows start at q0), and lse * log2(e) of such a row.
struct PrepareRow {
  int b, h, i;
  bool exists;
  std::int64_t tensor_row;
  __device__ PrepareRow(const FlashBwdParams& p, std::int64_t row)
      : b(static_cast<int>(row / p.len_q_padded / p.heads_q)),
        h(static_cast<int>(row / p.len_q_padded % p.heads_q)),
        i(static_cast<int>(row % p.len_q_padded)) {
    const SequenceRows seq = sequence_rows(p, b);
    exists = i < seq.len_q;
    tensor_row = seq.q0 + i;
  }
  __device__ float lse(const FlashBwdParams& p) const {
    return p.lse[b * p.lse_stride_b + h * p.lse_stride_h + tensor_row * p.lse_stride_l];
  }
};

// What the main kernels read of a row: lse * log2(e) and delta, with the non-finite rules
// (docs/semantics.md, "Backward") folded in. A row with no visible key (lse -inf): +inf, so
// that its probabilities are 0, and delta 0. A poisoned row (its lse NaN or +inf, or a
// non-finite element in its out or dout, which makes delta non-finite): NaN, so that its
// probabilities are NaN exactly where it sees a key (the masks replace them elsewhere), and
// delta 0, so that dS = P (dP - delta) stays 0 where P is.
struct RowStats {
  float lse_log2, delta;
};
__device__ __forceinline__ RowStats row_stats(float lse, float delta) {
  if (lse == -INFINITY) return {INFINITY, 0.0f};
  if (!(fabsf(lse) < INFINITY) || !(fabsf(delta) < INFINITY)) return {NAN, 0.0f};
  return {lse * kLog2e, delta};
}

// Any dtypes and strides: one warp per row. dO and O are rounded to the kernel's operand type T
// first, as dP = dO V^T sees them, so that dP - delta cancels where it should (e.g. one key:
// O = V, dS = 0). (A template so that every translation unit may instantiate it.)
template <typename T>
__global__ void __launch_bounds__(kPrepareRowsPerBlock * 32)
    flash_bwd_prepare_rows(const __grid_constant__ FlashBwdParams p) {
  const std::int64_t row =
      static_cast<std::int64_t>(blockIdx.x) * kPrepareRowsPerBlock + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  if (row >= static_cast<std::int64_t>(p.len_q_padded) * p.heads_q * p.batch) return;
  const PrepareRow at(p, row);
  float delta = 0.0f, lse = -INFINITY;
  if (at.exists) {
    const std::int64_t out_esize = p.out_type == ElemType::f32 ? 4 : 2;
    const std::int64_t do_esize = p.dout_type == ElemType::f32 ? 4 : 2;
    const char* o =
        static_cast<const char*>(p.out) +
        (at.b * p.o_stride_b + at.tensor_row * p.o_stride_l + at.h * p.o_stride_h) * out_esize;
    const char* d =
        static_cast<const char*>(p.dout) +
        (at.b * p.do_stride_b + at.tensor_row * p.do_stride_l + at.h * p.do_stride_h) * do_esize;
    for (int c = lane; c < p.dim_v; c += 32)
      delta += rounded<T>(load_elem(o, c, p.out_type)) * rounded<T>(load_elem(d, c, p.dout_type));
    lse = at.lse(p);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    delta += __shfl_xor_sync(0xffffffffu, delta, offset);
  if (lane == 0) {
    const RowStats stats = row_stats(lse, delta);
    p.delta[row] = stats.delta;
    p.lse_log2[row] = stats.lse_log2;
  }
  float* accum = p.dq_accum + row * p.dq_accum_cols;
  for (int c = lane; c < p.dq_accum_cols; c += 32) accum[c] = 0.0f;
}

// O and dO of type T with 16-byte aligned rows (p.vector_stores && p.dout_vector_loads): a group
// of 2^lanes_log2 lanes per row, each lane 8 columns per 16-byte load.
template <typename T>
__global__ void __launch_bounds__(kAuxThreads)
    flash_bwd_prepare_vectors(const __grid_constant__ FlashBwdParams p, int lanes_log2) {
  const int lanes = 1 << lanes_log2;
  const std::int64_t row =
      (static_cast<std::int64_t>(blockIdx.x) * kAuxThreads + threadIdx.x) >> lanes_log2;
  const int lane = static_cast<int>(threadIdx.x) & (lanes - 1);
  const bool valid = row < static_cast<std::int64_t>(p.len_q_padded) * p.heads_q * p.batch;
  float delta = 0.0f, lse = -INFINITY;
  if (valid) {
    const PrepareRow at(p, row);
    if (at.exists) {
      const T* o = static_cast<const T*>(p.out) + at.b * p.o_stride_b +
                   at.tensor_row * p.o_stride_l + at.h * p.o_stride_h;
      const T* d = static_cast<const T*>(p.dout) + at.b * p.do_stride_b +
                   at.tensor_row * p.do_stride_l + at.h * p.do_stride_h;
      for (int c = lane * 8; c < p.dim_v; c += lanes * 8) {
        const uint4 ov = __ldg(reinterpret_cast<const uint4*>(o + c));
        const uint4 dv = __ldg(reinterpret_cast<const uint4*>(d + c));
        const T* oe = reinterpret_cast<const T*>(&ov);
        const T* de = reinterpret_cast<const T*>(&dv);
#pragma unroll
        for (int e = 0; e < 8; ++e) delta = fmaf(to_float(oe[e]), to_float(de[e]), delta);
      }
      lse = at.lse(p);
    }
  }
  for (int offset = lanes / 2; offset > 0; offset /= 2)
    delta += __shfl_xor_sync(0xffffffffu, delta, offset);
  if (!valid) return;
  if (lane == 0) {
    const RowStats stats = row_stats(lse, delta);
    p.delta[row] = stats.delta;
    p.lse_log2[row] = stats.lse_log2;
  }
  // dq_accum_cols is a multiple of 64 (a head-dim bucket): float4 stores.
  float4* accum = reinterpret_cast<float4*>(p.dq_accum + row * p.dq_accum_cols);
  for (int c = lane; c < p.dq_accum_cols / 4; c += lanes) accum[c] = make_float4(0, 0, 0, 0);
}

// One CTA per region of convert_region_rows rows of one (b, h) plane of the workspace. The
// region is read with 16-byte
// loads in storage order and placed in shared memory by (row, column), decoding the sm90
// kernel's tiled layout (dq_layout.cuh) where p.dq_tile_cols > 0, so that the dq rows can be
// written whole: 16-byte stores of 8 elements where p.dq_vector_stores, else one element at a
// time.
template <int kBucket>
__global__ void __launch_bounds__(kAuxThreads)
    flash_bwd_convert_dq(const __grid_constant__ FlashBwdParams p) {
  constexpr int kRows = convert_region_rows(kBucket), kPitch = kBucket + 4;
  __shared__ __align__(16) float tile[kRows * kPitch];
  const int regions_per_plane = p.len_q_padded / kRows;
  const int region = static_cast<int>(blockIdx.x % regions_per_plane);
  const std::int64_t plane = blockIdx.x / regions_per_plane;  // b * heads_q + h
  const int row0 = region * kRows;
  const int b = static_cast<int>(plane / p.heads_q), h = static_cast<int>(plane % p.heads_q);
  const SequenceRows seq = sequence_rows(p, b);
  if (row0 >= seq.len_q) return;
  const float4* src =
      reinterpret_cast<const float4*>(p.dq_accum + (plane * p.len_q_padded + row0) * kBucket);
  const int cols = p.dq_tile_cols;
  for (int v = static_cast<int>(threadIdx.x); v < kRows * kBucket / 4; v += kAuxThreads) {
    const float4 x = src[v];
    if (cols > 0) {  // float4 nt * 128 + thread of sub-tile v / (16 cols): see dq_layout.cuh
      const int sub = v / (16 * cols), within = v % (16 * cols);
      const int nt = within / 128, thread = within % 128;
      const int r = (thread / 32) * 16 + (thread % 32) / 4;
      const int c = sub * cols + nt * 8 + (thread % 4) * 2;
      *reinterpret_cast<float2*>(&tile[r * kPitch + c]) = make_float2(x.x, x.y);
      *reinterpret_cast<float2*>(&tile[(r + 8) * kPitch + c]) = make_float2(x.z, x.w);
    } else {
      const int r = v * 4 / kBucket, c = v * 4 % kBucket;
      *reinterpret_cast<float4*>(&tile[r * kPitch + c]) = x;
    }
  }
  __syncthreads();

  const int rows = min(kRows, seq.len_q - row0);
  const std::int64_t esize = p.dq_type == ElemType::f32 ? 4 : 2;
  char* const dq =
      static_cast<char*>(p.dq) +
      (b * p.dq_stride_b + h * p.dq_stride_h + std::int64_t{seq.q0} * p.dq_stride_l) * esize;
  if (p.dq_vector_stores) {  // 16-bit dq, D % 8 == 0, 16-byte aligned rows
    const int chunks = p.dim / 8;
    for (int w = static_cast<int>(threadIdx.x); w < rows * chunks; w += kAuxThreads) {
      const int r = w / chunks, c = (w % chunks) * 8;
      const float4 lo = *reinterpret_cast<const float4*>(&tile[r * kPitch + c]);
      const float4 hi = *reinterpret_cast<const float4*>(&tile[r * kPitch + c + 4]);
      const float x[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
      std::uint32_t words[4];
#pragma unroll
      for (int e = 0; e < 4; ++e)
        words[e] = pack_pair16(p.dq_type, x[2 * e] * p.scale, x[2 * e + 1] * p.scale);
      *reinterpret_cast<uint4*>(dq + ((row0 + r) * p.dq_stride_l + c) * esize) =
          make_uint4(words[0], words[1], words[2], words[3]);
    }
  } else {
    for (int w = static_cast<int>(threadIdx.x); w < rows * p.dim; w += kAuxThreads) {
      const int r = w / p.dim, d = w % p.dim;
      store_elem(dq + (row0 + r) * p.dq_stride_l * esize, d, p.dq_type,
                 tile[r * kPitch + d] * p.scale);
    }
  }
}

template <typename T>
cudaError_t launch_flash_bwd_prepare(const FlashBwdParams& p, cudaStream_t stream) {
  const std::int64_t rows = static_cast<std::int64_t>(p.len_q_padded) * p.heads_q * p.batch;
  if (rows == 0) return cudaSuccess;
  if (p.vector_stores && p.dout_vector_loads) {
    int lanes_log2 = 0;
    while ((8 << lanes_log2) < p.dim_v && lanes_log2 < 5) ++lanes_log2;
    const std::int64_t rows_per_block = kAuxThreads >> lanes_log2;
    flash_bwd_prepare_vectors<T>
        <<<static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block), kAuxThreads, 0,
           stream>>>(p, lanes_log2);
  } else {
    flash_bwd_prepare_rows<T>
        <<<static_cast<unsigned>((rows + kPrepareRowsPerBlock - 1) / kPrepareRowsPerBlock),
           kPrepareRowsPerBlock * 32, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

template <int kBucket>
cudaError_t launch_flash_bwd_convert_dq(const FlashBwdParams& p, cudaStream_t stream) {
  const std::int64_t regions =
      static_cast<std::int64_t>(p.len_q_padded / convert_region_rows(kBucket)) * p.heads_q *
      p.batch;
  if (regions == 0 || p.len_q == 0 || p.dim == 0) return cudaSuccess;
  flash_bwd_convert_dq<kBucket><<<static_cast<unsigned>(regions), kAuxThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace tileattn::cuda
