// The interface between the CPU flash backward's driver (flash_backward.cpp) and its
// per-instruction-set compute kernel (backward_kernel.inl): plain structs and raw f32 buffers
// only, for the same ODR reasons as kernels.hpp.
#pragma once

#include <cstdint>

#include "cpu/kernels.hpp"

namespace tileattn::detail {

// One step of FlashAttention-2's backward: one query tile (rows of one query head) against one
// key block of its kv head. All buffers are f32, packed by the driver (zero beyond Lq, Lk, D, Dv).
struct BackwardStep {
  std::int64_t rows;                      // query rows in the tile (<= block_q)
  std::int64_t dim, dim_v;                // D, Dv
  std::int64_t dim_padded, dim_v_padded;  // rounded up to whole vectors

  // Q and dO transposed in groups of q_group rows (f32_bwd_group_rows in tile_config.hpp):
  // element (r, d) of Q at q_t[(r / q_group) * q_group * dim + d * q_group + r % q_group].
  std::int64_t q_group;    // must be the kernel's S / dP micro-tile rows
  const float* q_t;        // [block_q / q_group][dim][q_group]
  const float* q_rows;     // [block_q][dim_padded]
  const float* dout_t;     // [block_q / q_group][dim_v][q_group]
  const float* dout_rows;  // [block_q][dim_v_padded]
  const float* lse_log2;   // [rows] lse * log2(e); +inf for a fully masked row
  const float* delta;      // [rows] rowsum(dO o O)

  const float* k_t;     // [dim][block_k]        K block transposed
  const float* k_rows;  // [block_k][dim_padded]
  const float* v_t;     // [dim_v][block_k]      V block transposed
  std::int64_t key0;    // first key of the block

  // Score modifications and masking of the tile, as for the forward (key ranges, scale,
  // softcap, ALiBi, masks, dropout: only those fields of TileJob are read).
  TileJob mods;
  bool interior;  // the block lies inside every row's visible range

  // Gradients, accumulated (the scale is applied by the driver): dk and dv of the key block
  // unless nullptr, dq rows of the tile unless nullptr.
  float* dk;  // [block_k][dim_padded]
  float* dv;  // [block_k][dim_v_padded]
  float* dq;  // [block_q][dim_padded]
  // Optional gate around the dq product (the deterministic mode's fixed order of key blocks):
  // called with enter = true before adding to dq, enter = false after.
  void (*dq_gate)(void* arg, bool enter);
  void* dq_gate_arg;

  // Scratch owned by the calling thread, [block_q][block_k] each.
  float* probs;
  float* dprobs;
  float* dropped;       // dropout only
  float* softcap_grad;  // softcap only
};

using BackwardKernel = void (*)(const BackwardStep& step);

BackwardKernel cpu_backward_kernel_portable();
BackwardKernel cpu_backward_kernel_avx2();
BackwardKernel cpu_backward_kernel_avx512();

}  // namespace tileattn::detail
