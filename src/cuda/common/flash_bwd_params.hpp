// The backward kernels' view of one call: the forward's FlashFwdParams (q, k, v, out, lse and
// every score option, read-only here) plus the incoming gradient, the three gradient outputs and
// the f32 workspace the host allocates per call (stream-ordered). Built by
// src/cuda/cuda_backward.cu.
#pragma once

#include <cstdint>

#include "cuda/common/flash_fwd_params.hpp"

namespace tileattn::cuda {

struct FlashBwdParams : FlashFwdParams {
  const void* dout;  // [B, Lq, Hq, Dv]
  void* dq;          // [B, Lq, Hq, D]
  void* dk;          // [B, Lk, Hkv, D]
  void* dv;          // [B, Lk, Hkv, Dv]
  std::int64_t do_stride_b, do_stride_l, do_stride_h;
  std::int64_t dq_stride_b, dq_stride_l, dq_stride_h;
  std::int64_t dk_stride_b, dk_stride_l, dk_stride_h;
  std::int64_t dv_stride_b, dv_stride_l, dv_stride_h;
  ElemType dout_type, dq_type, dk_type, dv_type;
  bool dout_vector_loads;  // 16-byte cp.async loads of dout tiles are legal
  bool dq_vector_stores;   // dq: 16-byte stores of 8 elements are legal (16-bit, alignment)
  bool dkv_vector_stores;  // dk and dv: the same (16-bit, dim and dim_v % 8, alignment)

  int heads_kv;
  int num_n_blocks;       // ceil(len_k / block_n): key blocks, one CTA each (x chunks x Hkv x B)
  int cta_section_pairs;  // the CTA order of the backward kernels: 0, or sections of this many
                          // (chunk, Hkv, B) pairs, key blocks outer (cuda/common/bwd_cta_order.cuh)
  int len_q_padded;  // rows of the workspace arrays per (b, h): len_q rounded up to 128 (>= every
                     // block_m)

  // Workspace, per (b, h) row-major with len_q_padded rows. Rows >= len_q: delta 0, lse +inf.
  float* dq_accum;    // [B, Hq, len_q_padded, head-dim bucket]: dQ / scale, summed by atomics or
                      // (sm90) bulk reductions
  int dq_accum_cols;  // floats per workspace row of dq_accum (the head-dim bucket); the prepare
                      // kernel zeroes them
  int dq_tile_cols;   // 0: dq_accum row-major; else the sm90 kernel's tiled layout with this many
                      // columns per sub-tile (src/cuda/common/dq_layout.cuh)
  float* delta;       // [B, Hq, len_q_padded]: rowsum(dO o O)
  float* lse_log2;    // [B, Hq, len_q_padded]: lse * log2(e); +inf for rows with no visible key

  // Deterministic mode: one zeroed counter per (b, h, query block, column chunk); the key blocks
  // that see a query block add their dQ in key-block order (each waits for its turn). nullptr:
  // the adds race (fast, not bitwise reproducible).
  int* dq_turn;
};

}  // namespace tileattn::cuda
