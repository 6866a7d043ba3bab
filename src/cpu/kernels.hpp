// The interface between the ISA-neutral driver (flash_forward.cpp: threads, buffers, packing,
// dtype conversion, work order) and the per-instruction-set compute kernels.
//
// Each kernel set is the same source (flash_kernel.inl) compiled with different target flags in
// its own translation unit. Those translation units see only this header's plain structs and
// raw f32 buffers — no standard-library templates, no inline helpers shared with other
// translation units — so no function compiled for a wider ISA can be merged by the linker into
// code that runs on a narrower machine.
#pragma once

#include <cstdint>

#include "common/philox.hpp"

namespace tileattn::detail {

// One query tile of one (batch, head): everything the compute kernel needs, precomputed.
struct TileJob {
  std::int64_t rows;          // query rows in the tile (<= block_q)
  std::int64_t dim;           // D
  std::int64_t dim_padded;    // D rounded up (packed K and Q tile)
  std::int64_t dim_v_padded;  // Dv rounded up (packed V row length and out row length)

  // Layouts per kernel family (tile_config.hpp): f32 groups of f32_q_group_rows rows, each
  // [dim][group] (transposed); amx
  // [block_q][dim_padded] bf16 with rows beyond `rows` zero; bf16_dot [dim_padded/2][block_q][2].
  const void* q;
  std::int64_t q_group;  // f32: rows per Q group, which must be the kernel's Q·Kᵀ micro-tile rows
  // Packed K and V of the (batch, kv head), block after block, zero beyond Lk, D and Dv.
  const void* k_packed;
  const void* v_packed;
  std::int64_t block_begin, block_end;  // key blocks to visit

  // Keys whose K or V row holds a NaN or Inf, zeroed in the packed copy: two words per key
  // block (bit c % 64 of word c / 64 for the block's key c), or nullptr when there are none.
  // A row that sees such a key is poisoned (docs/semantics.md, "Non-finite values").
  const std::uint64_t* key_poison;
  // Per row, set by the kernel when the row sees a poisoned key; finish_tile then writes NaN
  // to the row's out and lse. [block_q] scratch.
  std::uint8_t* row_poison;

  // Keys visible to each row by causal/window/key length: [key_first[r], key_last[r]).
  const std::int64_t* key_first;
  const std::int64_t* key_last;

  float scale;        // multiplier of q.k
  float scale_log2;   // scale * log2(e): scores are kept in log2 units
  float softcap;      // c > 0 enables s = c * tanh(s / c) on the natural-unit scaled score
  float alibi_slope;  // 0 = off; else subtract slope * |alibi_pos0 + r - j| (natural units)
  std::int64_t alibi_pos0;

  // Optional mask rows: element (r, j) is at mask[r * mask_stride_q + j * mask_stride_k].
  const std::uint8_t* bool_mask;  // true = attend
  const float* additive_mask;
  std::int64_t mask_stride_q, mask_stride_k;

  // Dropout (f32 family only): nullptr when off; else the tile is rows row0.. of head
  // (batch, head) and `keep` is [block_q][block_k] scratch for the keep factors.
  const DropoutParams* dropout;
  std::int64_t batch, head, row0;
  float* keep;

  // Outputs: normalised rows and the natural-log denominator (-inf for a fully masked row).
  float* out;  // [rows][dim_v_padded]
  float* lse;  // [rows]

  // Scratch owned by the calling thread.
  float* scores;              // [block_q][block_k]
  float* row_max;             // [block_q]
  float* row_sum;             // [block_q]
  float* row_scale;           // [block_q]
  std::uint16_t* probs_bf16;  // amx, bf16_dot: [block_q][block_k], rows beyond `rows` zero
};

using TileKernel = void (*)(const TileJob& job);

TileKernel cpu_tile_kernel_amx_bf16();
TileKernel cpu_tile_kernel_portable();
TileKernel cpu_tile_kernel_avx2();
TileKernel cpu_tile_kernel_avx512();
TileKernel cpu_tile_kernel_avx512_bf16();
TileKernel cpu_tile_kernel_avx512_bf16_dot();

}  // namespace tileattn::detail
