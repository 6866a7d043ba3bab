// Every tile choice of the sm80 kernels (mma.sync forward and backward), per head-dim bucket. The
// Hopper kernels' table is src/cuda/sm90/tile_config.hpp. The dispatchers, the kernels and the
// benchmark read these tables.
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
  // The fast kernel's softmax on raw scores with the scale folded into the exponent's FFMA
  // (flash_fwd_kernel.cuh). Measured on an H100 (the sm80 kernel compiled for sm_90a): +2% at
  // D 64, -1% at D 128 and 256, so only D 64 takes it.
  bool fold_scale = false;

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
    case 64:
      return {.head_dim = 64,
              .block_m = 128,
              .block_n = 128,
              .warps = 4,
              .stages = 2,
              .min_blocks = 2,
              .fold_scale = true};
    case 96:
      return {
          .head_dim = 96, .block_m = 128, .block_n = 64, .warps = 4, .stages = 2, .min_blocks = 2};
    case 128:
      return {
          .head_dim = 128, .block_m = 128, .block_n = 64, .warps = 4, .stages = 2, .min_blocks = 2};
    case 192:
      return {
          .head_dim = 192, .block_m = 128, .block_n = 64, .warps = 8, .stages = 2, .min_blocks = 1};
    case 256:
      return {
          .head_dim = 256, .block_m = 128, .block_n = 32, .warps = 8, .stages = 2, .min_blocks = 1};
    default: return {};
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
  // The fast score path outside deterministic mode runs flash_bwd_2d_kernel (two-dimensional
  // warp tiles, flash_bwd_kernel_2d.cuh; D <= 128 only) instead of flash_bwd_kernel.
  bool two_d_fast_path = false;

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
    case 64:  // 129 KB shared memory
      return {.head_dim = 64,
              .block_m = 128,
              .warps = 8,
              .acc_dim = 64,
              .min_blocks = 1,
              .two_d_fast_path = true};
    case 128:  // 145 KB
      return {.head_dim = 128,
              .block_m = 64,
              .warps = 8,
              .acc_dim = 128,
              .min_blocks = 1,
              .two_d_fast_path = true};
    case 256:  // 139 KB, two column chunks
      return {.head_dim = 256, .block_m = 32, .warps = 4, .acc_dim = 128, .min_blocks = 1};
    default: return {};
  }
}

}  // namespace tileattn::cuda
