// Tile sizes of the f32 (SIMT, FMA) kernels, per head-dim bucket (max(D, Dv) rounded up to 64,
// 128 or 256): query rows (block_m) and keys (block_n) per step of each kernel, and the shared
// memory each one takes. Every kernel runs 256 threads as a 16 x 16 grid; a thread owns a
// (block / 16) x (block / 16) piece of every product (src/cuda/f32/f32_gemm.cuh).
#pragma once

namespace tileattn::cuda::f32 {

inline constexpr int kThreads = 256;

constexpr int head_dim_bucket(int dim) {
  return dim <= 64 ? 64 : dim <= 128 ? 128 : 256;
}

struct F32Tiles {
  int head_dim, block_m, block_n;
};

// Forward: Q^T (dim x block_m), K^T (dim x block_n), V (block_n x dim), P^T (block_n x block_m).
constexpr F32Tiles fwd_tiles(int bucket) {
  return bucket == 256 ? F32Tiles{256, 64, 32} : F32Tiles{bucket, 64, 64};
}
constexpr int fwd_smem_bytes(int bucket) {
  const F32Tiles t = fwd_tiles(bucket);
  return 4 * (t.head_dim * t.block_m + 2 * t.head_dim * t.block_n + t.block_n * t.block_m) +
         4 * (t.block_m + t.block_n);
}

// Backward, dK / dV: one CTA per key block. K^T and V^T (dim x block_n) stay; per step of
// block_m query rows Q^T, Q, dO^T, dO (dim x block_m each), P and dS (block_m x block_n) and
// lse, delta and the row flags.
constexpr F32Tiles bwd_dkdv_tiles(int bucket) {
  return bucket == 64    ? F32Tiles{64, 32, 64}
         : bucket == 128 ? F32Tiles{128, 32, 32}
                         : F32Tiles{256, 16, 32};
}
constexpr int bwd_dkdv_smem_bytes(int bucket) {
  const F32Tiles t = bwd_dkdv_tiles(bucket);
  return 4 * (2 * t.head_dim * t.block_n + 4 * t.head_dim * t.block_m + 2 * t.block_m * t.block_n) +
         4 * (t.block_n + 3 * t.block_m);
}

// Backward, dQ: one CTA per query block. Q^T and dO^T (dim x block_m) stay; per key block K^T,
// V^T and K (dim x block_n) and dS^T (block_n x block_m).
constexpr F32Tiles bwd_dq_tiles(int bucket) {
  return bucket == 64    ? F32Tiles{64, 64, 64}
         : bucket == 128 ? F32Tiles{128, 32, 32}
                         : F32Tiles{256, 32, 16};
}
constexpr int bwd_dq_smem_bytes(int bucket) {
  const F32Tiles t = bwd_dq_tiles(bucket);
  return 4 * (2 * t.head_dim * t.block_m + 3 * t.head_dim * t.block_n + t.block_n * t.block_m) +
         4 * (t.block_m + t.block_n);
}

static_assert(fwd_smem_bytes(256) <= 163 * 1024 && bwd_dkdv_smem_bytes(256) <= 163 * 1024 &&
                  bwd_dq_smem_bytes(256) <= 163 * 1024,
              "the f32 kernels fit an A100's 163 KB of shared memory per CTA");

}  // namespace tileattn::cuda::f32
