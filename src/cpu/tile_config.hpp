// Every tile and block choice of the CPU flash kernels lives here; the driver, the kernels, the
// benchmark and the docs all read it.
#pragma once

#include <cstdint>

namespace tileattn::detail {

constexpr std::int64_t round_up(std::int64_t x, std::int64_t m) {
  return (x + m - 1) / m * m;
}

// The two kernel families and their packed layouts.
//   f32: K transposed into panels of [D][k_panel] f32, V into panels of [block_k][v_panel] f32,
//        the Q tile transposed in groups of f32_q_group_rows rows ([block_q / group][D][group]
//        f32). Any storage dtype (converted when packing).
//   amx: bf16 storage only. K as [D/2][block_k][2] and V as [block_k/2][Dv][2] bf16 (the VNNI
//        pair layout of AMX's B operand), the Q tile as [block_q][D] bf16; D and Dv padded to 32.
//   bf16_dot: bf16 storage only, for the AVX-512 bf16 dot product (vdpbf16ps). K and V packed as
//        for amx; the Q tile as pairs transposed, [D/2][block_q][2] bf16; D padded to 2.
enum class KernelFamily { f32, amx, bf16_dot };

struct CpuTileConfig {
  std::int64_t block_q;   // query rows per work item (one thread's Q tile)
  std::int64_t block_k;   // keys per streamed K/V block
  std::int64_t d_align;   // D padded to a multiple of this in packed K and the Q tile
  std::int64_t dv_align;  // Dv padded to a multiple of this in packed V and the O tile
  std::int64_t k_panel;   // f32: keys per contiguous panel of packed K (fixed across ISAs)
  std::int64_t v_panel;   // f32: Dv columns per contiguous panel of packed V
  // Budget for K/V packed at once: heads are packed in groups up to this size so that small
  // heads still give every thread work, while one huge head costs only its own packed copy.
  std::int64_t pack_budget_bytes;
};

constexpr CpuTileConfig cpu_tile_config(KernelFamily family = KernelFamily::f32) {
  if (family == KernelFamily::amx) return {64, 64, 32, 32, 0, 0, 16ll << 20};
  if (family == KernelFamily::bf16_dot) return {48, 64, 2, 16, 0, 0, 16ll << 20};
  return {42, 64, 1, 16, 32, 64, 16ll << 20};
}

// f32 family: rows per Q group = rows of the Q·Kᵀ micro-tile for vectors of `lanes` floats. A
// micro-tile's broadcasts then come from group·4 contiguous bytes per d (the whole group is
// group·D·4 bytes) instead of one cache line per d spread over the whole Q tile: with 32 KiB of
// L1 (Zen 3) the [D][block_q] tile and a K panel do not fit together.
constexpr std::int64_t f32_q_group_rows(int lanes) {
  return lanes == 16 ? 14 : 3;
}
static_assert(cpu_tile_config().block_q % f32_q_group_rows(16) == 0 &&
                  cpu_tile_config().block_q % f32_q_group_rows(8) == 0,
              "the Q tile holds whole groups");

// The CPU flash backward (f32 kernels for every storage dtype): query tiles of block_q rows
// against key blocks of block_k keys; the driver packs the Q side (Q, dO, lse, delta) and the
// K side (K, V) of up to pack_budget_bytes of (batch, kv head) pairs at once.
struct CpuBackwardConfig {
  std::int64_t block_q, block_k;
  std::int64_t d_align;  // D and Dv padded to a multiple of this in the row-major buffers
  std::int64_t pack_budget_bytes;
};

constexpr CpuBackwardConfig cpu_backward_config() {
  return {48, 64, 16, 32ll << 20};
}

// The backward's transposed Q and dO tiles are packed in groups of the S / dP micro-tile's rows
// (each [D][rows]), for the same reason as f32_q_group_rows.
constexpr std::int64_t f32_bwd_group_rows(int lanes) {
  return lanes == 16 ? 12 : 3;
}
static_assert(cpu_backward_config().block_q % f32_bwd_group_rows(16) == 0 &&
                  cpu_backward_config().block_q % f32_bwd_group_rows(8) == 0,
              "the backward's Q tile holds whole groups");

// Sizes of the packed buffers, in elements of the family's packed type (f32 or bf16).
struct PackedGeometry {
  std::int64_t dim_padded, dim_v_padded;
  std::int64_t k_block_elems, v_block_elems;  // one key block
  std::int64_t element_bytes;
};

constexpr PackedGeometry packed_geometry(KernelFamily family, std::int64_t dim,
                                         std::int64_t dim_v) {
  const CpuTileConfig c = cpu_tile_config(family);
  PackedGeometry g{};
  g.dim_padded = round_up(dim, c.d_align);
  g.dim_v_padded = round_up(dim_v, c.dv_align);
  g.k_block_elems = g.dim_padded * c.block_k;
  g.v_block_elems = c.block_k * g.dim_v_padded;
  g.element_bytes = family == KernelFamily::f32 ? 4 : 2;
  return g;
}

}  // namespace tileattn::detail
