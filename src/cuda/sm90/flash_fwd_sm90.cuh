// Hopper (sm_90a) forward for the common fast case: f16/bf16 storage, D and Dv in the {64, 128}
// buckets, 16-byte aligned rows, scale > 0, no softcap / ALiBi / mask (causal, window and key
// lengths are runtime values). Everything else runs the sm80 kernel.
//
// One CTA = warp_groups warpgroups, each owning 64 query rows. All threads stream K/V blocks of
// block_n keys through a cp.async pipeline into 128-byte-swizzled shared memory laid out as the
// wgmma canonical layouts (64-element column blocks of 8-row x 128-byte atoms). Per block each
// warpgroup runs S = Q K^T as wgmma m64n{block_n}k16 (A and B from shared memory, K-major), the
// online softmax in registers (same fragment layout as the sm80 kernel: the wgmma accumulator is
// the m16n8 C fragment per warp), then O += P V as wgmma m64n{D}k16 with P from registers and V
// read transposed (MN-major) from shared memory. Two CTAs share an SM, so one CTA's softmax runs
// while the other's wgmma does (sm90_tile_config). Overlapping the softmax of block j+1 with
// block j's P V inside one warpgroup (FlashAttention-3's intra-warpgroup overlap) was tried:
// ptxas 13.0 serialises it (C7514: accumulator registers read between start and end of the
// pipeline stage, i.e. it waits for all wgmma groups before the softmax), so it was dropped.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/elements.cuh"
#include "cuda/common/launch.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/tile_coords.cuh"
#include "cuda/sm80/flash_fwd_config.hpp"
#include "cuda/sm80/flash_fwd_params.hpp"
#include "cuda/sm90/wgmma.cuh"

namespace tileattn::cuda {

// Offset (elements) of 16-byte chunk `chunk` of row `row` in a (rows, D) tile stored as D / 64
// column blocks of (rows, 64), each row 128 bytes with its chunks XOR-ed by row % 8: the
// SWIZZLE_128B canonical layout wgmma descriptors describe.
template <int kRows>
__device__ __forceinline__ int sw128_offset(int row, int chunk) {
  return (chunk >> 3) * kRows * 64 + row * 64 + (((chunk & 7) ^ (row & 7)) << 3);
}

// wgmma shared-memory matrix descriptor: start address, leading / stride byte offsets (16-byte
// units), 128-byte swizzle (mode 1 in bits 62-63).
__device__ __forceinline__ std::uint64_t sw128_desc(const void* smem, std::uint32_t lead_bytes,
                                                    std::uint32_t stride_bytes) {
  const std::uint32_t addr = smem_address(smem);
  return static_cast<std::uint64_t>((addr & 0x3FFFF) >> 4) |
         (static_cast<std::uint64_t>(lead_bytes >> 4) << 16) |
         (static_cast<std::uint64_t>(stride_bytes >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Pins accumulator registers at this point of the program: the compiler may not move their
// reads or writes across it (used around wgmma issue and wait, which it cannot see through).
template <int kRows, int kCols>
__device__ __forceinline__ void fence_operand(float (&r)[kRows][kCols]) {
#pragma unroll
  for (int i = 0; i < kRows; ++i)
#pragma unroll
    for (int j = 0; j < kCols; ++j) asm volatile("" : "+f"(r[i][j])::"memory");
}

template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Orders this thread's generic-proxy shared-memory writes (cp.async) before async-proxy reads
// (wgmma) that follow the next barrier.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

template <typename T, int kRows, int kDim, int kThreads>
__device__ __forceinline__ void load_tile_sw128(T* tile, const T* src, std::int64_t stride_l,
                                                int rows_valid, int cols_valid) {
  constexpr int kChunks = kDim / 8;
#pragma unroll
  for (int idx = static_cast<int>(threadIdx.x); idx < kRows * kChunks; idx += kThreads) {
    const int row = idx / kChunks, chunk = idx % kChunks;
    const bool valid = row < rows_valid && chunk * 8 < cols_valid;
    cp_async_16(smem_address(tile + sw128_offset<kRows>(row, chunk)),
                valid ? src + row * stride_l + chunk * 8 : src, valid ? 16 : 0);
  }
}

template <typename T, int kBucket>
__global__ void __launch_bounds__(sm90_tile_config(kBucket).threads(),
                                  sm90_tile_config(kBucket).min_blocks)
    flash_fwd_sm90_kernel(const __grid_constant__ FlashFwdParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr Sm90TileConfig cfg = sm90_tile_config(kBucket);
  constexpr int kDim = cfg.head_dim, kBlockM = cfg.block_m, kBlockN = cfg.block_n;
  constexpr int kThreads = cfg.threads(), kStages = cfg.stages;
  constexpr int kNTiles = kBlockN / 8, kDTiles = kDim / 8;
  static_assert(kBlockM == 64 * cfg.warp_groups && kDim % 64 == 0 && kBlockN % 64 == 0, "tiles");
  static_assert(kStages >= 2, "pipeline");

  extern __shared__ unsigned char smem_raw[];
  T* const q_tile = reinterpret_cast<T*>((reinterpret_cast<std::uintptr_t>(smem_raw) + 1023) &
                                         ~static_cast<std::uintptr_t>(1023));  // (block_m, D)
  T* const kv_tiles = q_tile + kBlockM * kDim;  // stages x [K (block_n, D), V (block_n, D)]

  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4, t = lane % 4;
  const int warp_group = warp / 4;

  const TileCoords tile = tile_coords<kBlockM>(p);
  const int h = tile.h, b = tile.b, hk = tile.hk, m0 = tile.m0;
  const int rows_in_block = tile.rows_in_block, klen = tile.klen;
  const auto visible = [&](int i, int& first, int& last) { tile.visible(i, first, last); };
  int first_top, last_top, first_bottom, last_bottom;
  visible(m0, first_top, last_top);
  visible(m0 + rows_in_block - 1, first_bottom, last_bottom);
  const int n_block_begin = first_top / kBlockN;
  const int n_block_end = first_top < last_bottom ? (last_bottom + kBlockN - 1) / kBlockN : 0;

  const T* q_src =
      static_cast<const T*>(p.q) + b * p.q_stride_b + h * p.q_stride_h + m0 * p.q_stride_l;
  const T* k_src = static_cast<const T*>(p.k) + b * p.k_stride_b + hk * p.k_stride_h;
  const T* v_src = static_cast<const T*>(p.v) + b * p.v_stride_b + hk * p.v_stride_h;
  auto load_kv = [&](int n_block, int slot) {
    T* k_tile = kv_tiles + slot * 2 * kBlockN * kDim;
    const int n0 = n_block * kBlockN, rows = min(kBlockN, klen - n0);
    load_tile_sw128<T, kBlockN, kDim, kThreads>(k_tile, k_src + n0 * p.k_stride_l, p.k_stride_l,
                                                rows, p.dim);
    load_tile_sw128<T, kBlockN, kDim, kThreads>(k_tile + kBlockN * kDim, v_src + n0 * p.v_stride_l,
                                                p.v_stride_l, rows, p.dim_v);
  };
  // Prologue: Q and the first stages - 1 K/V blocks, one commit group per block.
  load_tile_sw128<T, kBlockM, kDim, kThreads>(q_tile, q_src, p.q_stride_l, rows_in_block, p.dim);
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (n_block_begin + st < n_block_end) load_kv(n_block_begin + st, st);
    cp_async_commit();
  }

  const int warp_row0 = warp * 16;  // this warp's 16 rows: warpgroup rows + 16 * (warp % 4)
  float acc_o[kDTiles][4];          // (16 rows, D): P V wgmma accumulator
#pragma unroll
  for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_o[dt][e] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};  // base-2 units

  // Descriptors. K-major (Q, K): 8-row groups 1024 bytes apart (the leading offset is unused with
  // 128-byte swizzle); k16 steps advance the start by 32 bytes inside a 128-byte row and by a
  // column block every 4 steps. MN-major (V): leading offset = 64-column blocks block_n * 128
  // bytes apart along N, stride offset = 8-key groups 1024 bytes apart along K.
  const T* q_warp_group = q_tile + warp_group * 64 * 64;

  for (int n_block = n_block_begin, it = 0; n_block < n_block_end; ++n_block, ++it) {
    cp_async_wait<kStages - 2>();
    fence_proxy_async();
    __syncthreads();  // block n_block landed for all threads; slot (it - 1) % stages is free
    if (n_block + kStages - 1 < n_block_end)
      load_kv(n_block + kStages - 1, (it + kStages - 1) % kStages);
    cp_async_commit();
    const T* k_tile = kv_tiles + (it % kStages) * 2 * kBlockN * kDim;
    const T* v_tile = k_tile + kBlockN * kDim;

    float s[kNTiles][4];  // (16 rows, block_n): S wgmma accumulator, then probabilities
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kDim / 16; ++ks) {
      const int col_block = ks / 4, in_row = (ks % 4) * 16;  // elements
      wgmma_ss<T, kBlockN>(
          s, sw128_desc(q_warp_group + col_block * kBlockM * 64 + in_row, 16, 1024),
          sw128_desc(k_tile + col_block * kBlockN * 64 + in_row, 16, 1024), ks > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_operand(s);

    // Online softmax, lean: the max is taken on raw scores (scale > 0 on this path), then
    // p = 2^(s * scale log2 e - max), one FFMA and one MUFU per score.
    const int n0 = n_block * kBlockN;
    if (n0 < first_bottom || n0 + kBlockN > last_top) {  // a block on a window/length edge
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        int first, last;
        visible(m0 + warp_row0 + g + 8 * hh, first, last);
        first -= n0 + 2 * t;
        last -= n0 + 2 * t;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int j = nt * 8 + e;
            if (j < first || j >= last) s[nt][2 * hh + e] = -INFINITY;
          }
      }
    }
    float rescale[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float block_max = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
        block_max = fmaxf(block_max, fmaxf(s[nt][2 * hh], s[nt][2 * hh + 1]));
      block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 1));
      block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 2));
      const float new_max = fmaxf(row_max[hh], block_max * p.scale_log2);
      const float base = new_max == -INFINITY ? 0.0f : new_max;  // all masked so far
      rescale[hh] = exp2_approx(row_max[hh] - base);
      row_max[hh] = new_max;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[nt][2 * hh + e];
          x = exp2_approx(fmaf(x, p.scale_log2, -base));
          sum += x;
        }
      row_sum[hh] = row_sum[hh] * rescale[hh] + sum;
    }
    std::uint32_t pa[kBlockN / 16][4];  // P as wgmma A fragments: n8 tiles 2k, 2k+1 = k16 step k
#pragma unroll
    for (int ks = 0; ks < kBlockN / 16; ++ks) {
      pa[ks][0] = MmaType<T>::pack(s[2 * ks][0], s[2 * ks][1]);
      pa[ks][1] = MmaType<T>::pack(s[2 * ks][2], s[2 * ks][3]);
      pa[ks][2] = MmaType<T>::pack(s[2 * ks + 1][0], s[2 * ks + 1][1]);
      pa[ks][3] = MmaType<T>::pack(s[2 * ks + 1][2], s[2 * ks + 1][3]);
    }
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[dt][e] *= rescale[e >> 1];

    fence_operand(acc_o);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kBlockN / 16; ++ks)
      wgmma_rs<T, kDim>(acc_o, pa[ks], sw128_desc(v_tile + ks * 16 * 64, kBlockN * 128, 1024));
    wgmma_commit();
    wgmma_wait<0>();
    fence_operand(acc_o);
  }
  cp_async_wait<0>();

  char* out_base = static_cast<char*>(p.out);
  const std::int64_t out_esize = p.out_type == ElemType::f32 ? 4 : 2;
  out_base += (b * p.o_stride_b + h * p.o_stride_h) * out_esize;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    float l = row_sum[hh];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int i = m0 + warp_row0 + g + 8 * hh;
    if (i >= p.len_q) continue;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    char* out_row = out_base + static_cast<std::int64_t>(i) * p.o_stride_l * out_esize;
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
      const int col = dt * 8 + 2 * t;
      if (col < p.dim_v) store_elem(out_row, col, p.out_type, acc_o[dt][2 * hh] * inv);
      if (col + 1 < p.dim_v) store_elem(out_row, col + 1, p.out_type, acc_o[dt][2 * hh + 1] * inv);
    }
    if (p.lse != nullptr && t == 0)
      p.lse[b * p.lse_stride_b + h * p.lse_stride_h + i * p.lse_stride_l] =
          l > 0.0f ? (row_max[hh] + __log2f(l)) * kLn2 : -INFINITY;
  }
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

template <typename T, int kBucket>
cudaError_t launch_flash_fwd_sm90(const FlashFwdParams& p, cudaStream_t stream) {
  constexpr Sm90TileConfig cfg = sm90_tile_config(kBucket);
  return launch_over_query_blocks(&flash_fwd_sm90_kernel<T, kBucket>, cfg, p, stream);
}

}  // namespace tileattn::cuda
