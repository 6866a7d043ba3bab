// Every tile choice of the CUDA kernels (sm80 and sm90 forward, sm80 backward), per head-dim
// bucket. The dispatchers, the kernels, the benchmark and docs/perf/gpu.md all read this file.
#pragma once

namespace tileattn::cuda {

// Head dims are padded up to the next bucket (zero columns cost compute but no extra code).
inline constexpr int kHeadDimBuckets[] = {64, 96, 128, 192, 256};

constexpr int head_dim_bucket(int dim) {
  for (int bucket : kHeadDimBuckets)
    if (dim <= bucket) return bucket;
  return 0;  // unsupported (validation limits D, Dv to 256)
}

struct TileConfig {
  int head_dim;    // padded head dim (bucket), for both D and Dv
  int block_m;     // query rows per CTA                      (Br)
  int block_n;     // keys per pipeline step                  (Bc)
  int warps;       // warps per CTA; each owns block_m / warps query rows
  int stages;      // K/V shared-memory stages of the cp.async pipeline
  int min_blocks;  // __launch_bounds__ minimum CTAs per SM

  constexpr int threads() const { return warps * 32; }
  constexpr int rows_per_warp() const { return block_m / warps; }
  constexpr int m_tiles() const { return rows_per_warp() / 16; }  // m16 tiles per warp
  // Shared-memory row pitch in elements: a multiple of 64 so the 16-byte-chunk XOR swizzle over
  // 8 chunks stays inside a row (96 and 192 are stored with pitch 128 and 192).
  constexpr int smem_pitch() const { return (head_dim + 63) / 64 * 64; }
  constexpr int smem_bytes() const { return (block_m + stages * 2 * block_n) * smem_pitch() * 2; }
};

// Two m16 tiles per warp for D <= 128 (each K/V fragment read from shared memory feeds two mma),
// one for the wide heads where the O accumulator alone takes D / 2 registers per m-tile.
// Shared memory stays under the sm_80 limit (163 KB per CTA).
constexpr TileConfig tile_config(int bucket) {
  switch (bucket) {
    case 64: return {64, 128, 128, 4, 2, 2};
    case 96: return {96, 128, 64, 4, 2, 2};
    case 128: return {128, 128, 64, 4, 2, 2};
    case 192: return {192, 128, 64, 8, 2, 1};
    case 256: return {256, 128, 32, 8, 2, 1};
    default: return {0, 0, 0, 0, 0, 0};
  }
}

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

// Every tile choice of the sm90 kernel (the sm80 twin is tile_config above).
constexpr Sm90TileConfig sm90_tile_config(int bucket) {
  switch (bucket) {
    // D 64: exp2_poly on every 16th n8 tile (session 15 A/B: every 8th +0.3..1.6% on top of the
    // max tree, every 4th slower; session 17, with speculation: every 16th +1.2..1.6% against
    // every 8th; at D 128 every 16th cost 2-3%). Speculation (session 16 A/B): D 64
    // +2..+10%, D 128 +2..+6%. D 256 speculates with block_n 64 (at 80 ptxas spilled 48 bytes
    // and 1k lost 4-8%); session 17 A/B against block_n 80 without it: +0.2..3.3%.
    // early_epilogue_rows (session 18 A/B): D 64 +0.5..1.1%, D 128 +0.2..1.2%, D 256 -1.1..0%.
    // half_masked_blocks (session 31 A/B): D 64 causal +0.7% (1k) .. +2.3% (4k), non-causal
    // +0.3..0.4%; D 128 -0.3..-1.9% (causal and not: the larger loop code), so D 64 only.
    case 64: return {64, 128, 128, 2, 4, 24, 240, 2, 16, true, true, true};  // 178 KB shared memory
    // D 128: 194 KB (a second Q buffer: 226 KB, -8..15%).
    case 128: return {128, 128, 128, 2, 2, 24, 240, 1, 0, true, true};
    case 256: return {256, 128, 64, 2, 2, 24, 240, 1, 0, true, false};  // 226 KB
    default: return {0, 0, 0, 0, 0, 0, 0, 0, 0, false, false, false};
  }
}

// The sm80 backward kernel (mma.sync): one CTA owns block_n = 16 x warps keys of one kv head
// (each warp 16 keys: S^T = K Q^T, dV += P^T dO, dP^T = V dO^T, dK += dS^T Q with the key rows
// in the mma's M dimension, so P^T and dS^T feed the next GEMM from registers) and visits the
// query blocks of block_m rows that see them, double-buffering Q, dO, lse and delta with
// cp.async. dQ = dS K goes through shared memory (dS^T) and f32 atomics. dK/dV accumulate
// acc_dim columns in registers; wider heads run head_dim / acc_dim column chunks as separate
// CTAs (each recomputes S and dP).
inline constexpr int kBwdHeadDimBuckets[] = {64, 128, 256};

constexpr int bwd_bucket(int dim) {
  return dim <= 64 ? 64 : dim <= 128 ? 128 : 256;
}

struct BwdTileConfig {
  int head_dim;    // padded head dim (bucket) of D and Dv
  int block_m;     // query rows per step
  int warps;       // 16 keys each
  int acc_dim;     // dK/dV columns per CTA
  int min_blocks;  // __launch_bounds__ minimum CTAs per SM

  constexpr int threads() const { return warps * 32; }
  constexpr int block_n() const { return warps * 16; }
  constexpr int chunks() const { return head_dim / acc_dim; }
  constexpr int ds_pitch() const { return block_m < 64 ? 64 : block_m; }
  // K, V tiles; two stages of (Q, dO) tiles; the dS^T tile; two stages of (lse, delta) rows.
  constexpr int smem_bytes() const {
    return (2 * block_n() * head_dim + 2 * 2 * block_m * head_dim + block_n() * ds_pitch()) * 2 +
           2 * 2 * block_m * 4;
  }
};

constexpr BwdTileConfig bwd_tile_config(int bucket) {
  switch (bucket) {
    case 64: return {64, 128, 8, 64, 1};    // 129 KB shared memory
    case 128: return {128, 64, 8, 128, 1};  // 145 KB
    case 256: return {256, 32, 4, 128, 1};  // 139 KB, two column chunks
    default: return {0, 0, 0, 0, 0};
  }
}

// The sm90 backward kernel (wgmma + TMA, fast score path, D <= 128): one producer warpgroup and
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
    case 64: return {64, 128, 128, 2, 24, 240};   // 196 KB shared memory
    case 128: return {128, 64, 128, 2, 24, 240};  // 195 KB
    default: return {0, 0, 0, 0, 0, 0};
  }
}

}  // namespace tileattn::cuda
