// Every tile and launch choice of the Hopper kernels (wgmma + TMA forward and backward), per
// head-dim bucket. The sm80 kernels' table is src/cuda/sm80/tile_config.hpp. The dispatchers, the
// kernels and the benchmark read these tables.
#pragma once

namespace tileattn::cuda {

// The sm90 kernel (wgmma + TMA, warp-specialised): one producer warpgroup (one thread issues the
// TMA loads) and `consumer_warp_groups` warpgroups of 64 query rows each; K and V stream through
// rings of `stages` shared-memory slots. Registers move from the producer to the consumers with
// setmaxnreg (producer_registers + consumer_registers budgets must fit the 64K register file).
struct Sm90TileConfig {
  int head_dim, block_m, block_n, consumer_warp_groups, stages;
  int producer_registers, consumer_registers;
  int q_stages;  // Q buffers: 2 lets the producer load the next tile's Q during this tile
  // Every exp_poly_every-th n8 tile of a row's scores takes its exponentials on the FMA pipes
  // (exp2_poly) instead of the MUFU, which the softmax otherwise saturates (0: none).
  int exp_poly_every = 0;
  // The fast kernels' softmax speculates: exponentials against the running maximum, without the
  // block's maximum, kept when all stay below 2^8 (else the block is redone). It needs a second
  // P buffer (32 registers); the general kernels and eager rescaling never speculate.
  bool speculate_max = false;
  // The epilogue's row values (1 / l, the logsumexp) and its first wait for the staging buffer
  // are done while the tile's last P V runs instead of after it.
  bool early_epilogue_rows = false;
  // In a masked key block (causal diagonal, window or length edge) where no row of a warp sees
  // a key of the block's second half, that warp skips the half's masks, maxima and
  // exponentials (fast kernels; a second softmax in the key loop's code).
  bool half_masked_blocks = false;

  // Launch choices: read by the host launcher (flash_fwd_sm90_launch.cuh), which passes them to
  // the kernel in its parameters (Sm90FwdParams).
  // Persistent grid: one CTA per SM, each taking tiles from the launch's counter until none are
  // left (false: one CTA per tile).
  bool persistent = true;
  // K/V bytes of one scheduling group of (batch, head) pairs, in MiB: about a sixth of the
  // H200's L2, so that the CTAs running at one time mostly hit L2.
  int schedule_group_mib = 8;
  // The consumer warpgroups take turns to issue their GEMMs (ping-pong), including a tile's
  // first S (first_turn) and last P V (finish_turn).
  bool ping_pong = true, first_turn = true, finish_turn = true;
  bool kv_evict_last = true;  // K/V loads carry the L2 evict-last hint (else evict-normal)
  // Lazy rescaling of the online softmax: the running maximum moves only when a new maximum
  // exceeds it by more than this (log2 units; 0: eager rescaling).
  float rescale_threshold = 8.0f;
  // The output goes through a shared-memory staging buffer where 16-byte stores are legal
  // (false: element pairs from the registers), and leaves it by TMA stores (false: 16-byte
  // stores).
  bool stage_output = true, tma_store = true;

  constexpr int threads() const { return (consumer_warp_groups + 1) * 128; }
  constexpr int q_tile_bytes() const { return block_m * head_dim * 2; }
  constexpr int kv_tile_bytes() const { return block_n * head_dim * 2; }
  // The output is staged in shared memory for TMA stores, up to 128 columns at a time (D 256:
  // two passes).
  constexpr int o_stage_cols() const { return head_dim < 128 ? head_dim : 128; }
  constexpr int o_stage_bytes() const { return block_m * o_stage_cols() * 2; }
  // Q tiles + stages x (K tile + V tile) + output staging + 1 KB of barriers, plus 1 KB to
  // align the base to the 1024-byte swizzle atom.
  constexpr int smem_bytes() const {
    return q_stages * q_tile_bytes() + stages * 2 * kv_tile_bytes() + o_stage_bytes() + 2048;
  }
};

// Head dims 96 and 192 run in the 128 and 256 buckets (TMA zero-fills the missing columns).
constexpr int sm90_bucket(int dim) {
  return dim <= 64 ? 64 : dim <= 128 ? 128 : 256;
}

// Every tile choice of the sm90 kernel (the sm80 twin is tile_config in sm80/tile_config.hpp).
// D 64 is bound by the MUFU: the exponentials of every 16th n8 tile go to the FMA pipes (every
// 8th gains less, every 4th overloads the FMA pipes); at D 128, where the GEMMs dominate, that
// costs a few percent, so D 128 and 256 keep all exponentials on the MUFU. Every bucket
// speculates on the running maximum (the largest gain at D 64). D 256 takes block_n 64: at 80
// the speculating kernel spills. The early epilogue rows pay at D 64 and 128, not at D 256.
// Half-masked blocks pay at D 64 (most on causal grids); at D 128 the larger loop code costs
// more than the skipped work saves.
constexpr Sm90TileConfig sm90_tile_config(int bucket) {
  switch (bucket) {
    case 64:  // 178 KB shared memory
      return {.head_dim = 64,
              .block_m = 128,
              .block_n = 128,
              .consumer_warp_groups = 2,
              .stages = 4,
              .producer_registers = 24,
              .consumer_registers = 240,
              .q_stages = 2,
              .exp_poly_every = 16,
              .speculate_max = true,
              .early_epilogue_rows = true,
              .half_masked_blocks = true};
    case 128:  // 194 KB (a second Q buffer, 226 KB, runs slower)
      return {.head_dim = 128,
              .block_m = 128,
              .block_n = 128,
              .consumer_warp_groups = 2,
              .stages = 2,
              .producer_registers = 24,
              .consumer_registers = 240,
              .q_stages = 1,
              .exp_poly_every = 0,
              .speculate_max = true,
              .early_epilogue_rows = true};
    case 256:  // 226 KB
      return {.head_dim = 256,
              .block_m = 128,
              .block_n = 64,
              .consumer_warp_groups = 2,
              .stages = 2,
              .producer_registers = 24,
              .consumer_registers = 240,
              .q_stages = 1,
              .exp_poly_every = 0,
              .speculate_max = true,
              .early_epilogue_rows = false};
    default: return {};
  }
}

// The sm90 backward kernel (wgmma + TMA, fast score path, D <= 128; buckets as bwd_bucket in
// sm80/tile_config.hpp): one producer warpgroup and
// two consumer warpgroups of 64 keys each (block_n = 128 keys of one kv head); per step of
// block_m query rows S^T and dP^T (wgmma, K / V x Q / dO from shared memory), dV and dK
// (wgmma, P^T / dS^T from registers) and dQ = dS K (wgmma, dS^T through shared memory). dQ is
// split between the warpgroups by columns at block_m 64 (each half of the head dim's columns of
// all 64 rows) and by rows at block_m 128 (each its 64 rows, all columns).
struct Sm90BwdTileConfig {
  int head_dim, block_m, block_n, stages;
  int producer_registers, consumer_registers;
  static constexpr int consumer_warp_groups = 2;
  constexpr int threads() const { return (consumer_warp_groups + 1) * 128; }
  constexpr bool dq_split_by_rows() const { return block_m == 128; }
  // Columns of one warpgroup's dQ sub-tile (64 rows), and of dq_accum's tiled layout
  // (dq_layout.cuh).
  constexpr int dq_cols() const { return dq_split_by_rows() ? head_dim : head_dim / 2; }
  constexpr int kv_tile_bytes() const { return block_n * head_dim * 2; }
  constexpr int q_tile_bytes() const { return block_m * head_dim * 2; }
  constexpr int ds_tile_bytes() const { return block_n * block_m * 2; }
  constexpr int row_stats_bytes() const { return block_m * 4; }  // lse or delta of one step
  constexpr int dq_stage_bytes() const { return block_m * head_dim * 4; }  // one step's dQ, f32
  // K and V; stages x (Q, dO, lse, delta); two dS^T tiles; dQ; barriers and 1 KB to align the
  // base to the 1024-byte swizzle atom.
  constexpr int smem_bytes() const {
    return 2 * kv_tile_bytes() + stages * 2 * (q_tile_bytes() + row_stats_bytes()) +
           2 * ds_tile_bytes() + dq_stage_bytes() + 2048;
  }
};

constexpr Sm90BwdTileConfig sm90_bwd_tile_config(int bucket) {
  switch (bucket) {
    case 64:  // 196 KB shared memory
      return {.head_dim = 64,
              .block_m = 128,
              .block_n = 128,
              .stages = 2,
              .producer_registers = 24,
              .consumer_registers = 240};
    case 128:  // 195 KB
      return {.head_dim = 128,
              .block_m = 64,
              .block_n = 128,
              .stages = 2,
              .producer_registers = 24,
              .consumer_registers = 240};
    default: return {};
  }
}

}  // namespace tileattn::cuda
