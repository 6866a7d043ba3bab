// Every tile and block choice of the CPU flash kernel lives here; the driver, the kernels, the
// benchmark and the docs all read it.
#pragma once

#include <cstdint>

namespace tileattn::detail {

struct CpuTileConfig {
  // (the panel widths are fixed across ISAs so that packing is ISA-neutral)
  std::int64_t block_q;   // query rows per work item (one thread's Q tile)
  std::int64_t block_k;   // keys per streamed K/V block
  std::int64_t dv_align;  // Dv is padded to a multiple of this in packed V and the O tile
  std::int64_t k_panel;   // keys per contiguous panel of packed K ([D][k_panel] each)
  std::int64_t v_panel;   // Dv columns per contiguous panel of packed V ([block_k][v_panel] each)
  // Budget for K/V packed at once: heads are packed in groups up to this size so that small
  // heads still give every thread work, while one huge head costs only its own packed copy.
  std::int64_t pack_budget_bytes;
};

constexpr CpuTileConfig cpu_tile_config() { return {48, 64, 16, 32, 64, 16ll << 20}; }

constexpr std::int64_t round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }

// Floats in one packed K block (K transposed, as block_k / k_panel panels of [D][k_panel]) and
// one packed V block (Dv padded, as panels of [block_k][v_panel]; the last panel may be narrower).
constexpr std::int64_t packed_k_block_floats(std::int64_t dim) {
  return dim * cpu_tile_config().block_k;
}
constexpr std::int64_t padded_dim_v(std::int64_t dim_v) {
  return round_up(dim_v, cpu_tile_config().dv_align);
}
constexpr std::int64_t packed_v_block_floats(std::int64_t dim_v) {
  return cpu_tile_config().block_k * padded_dim_v(dim_v);
}

}  // namespace tileattn::detail
