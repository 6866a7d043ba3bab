// Split-KV attention over a KV cache for sm80+ (Ampere, Ada, Hopper): one CTA owns a 16-row tile
// of (query row, head of the kv group) pairs of one sequence and kv head, and one split of the
// keys. The group's heads share the tile, so each K and V row is read from memory once per
// split for all of them. K/V blocks of kBlockN keys stream through a cp.async pipeline into
// swizzled shared memory, gathered row by row from the cache's pages; each of the four warps
// takes 16 keys of a block (S = Q K^T, online softmax, O += P V with mma.sync m16n8k16), and at
// the end the warps' partial results are merged through shared memory into the split's result:
// the output itself when the keys are not split, else a partial row that combine_kernel
// (cuda_kvcache.cu) merges across splits. Each split takes an equal share of its sequence's key
// blocks (the grid is planned from the cache's capacity; the lengths live on the device).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/decode_params.hpp"
#include "cuda/common/elements.cuh"
#include "cuda/common/poison.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/sm80/tile_io.cuh"

namespace tileattn::cuda {

struct DecodeConfig {
  int head_dim;  // bucket: 64, 128 or 256 (D and Dv at most this)
  int block_n;   // keys per pipeline stage: 16 per warp
  int stages;
  static constexpr int kWarps = 4;
  __host__ __device__ constexpr int threads() const { return kWarps * 32; }
  __host__ __device__ constexpr int pitch() const { return head_dim; }
  __host__ __device__ constexpr int smem_bytes() const {
    const int tiles = (kDecodeRows + stages * 2 * block_n) * pitch() * 2;
    const int merge = kWarps * kDecodeRows * (head_dim + 4) * 4;  // warps' partials, f32
    return tiles > merge ? tiles : merge;
  }
};

__host__ __device__ constexpr DecodeConfig decode_config(int bucket) {
  return bucket <= 64    ? DecodeConfig{64, 64, 4}
         : bucket <= 128 ? DecodeConfig{128, 64, 3}
                         : DecodeConfig{256, 64, 2};
}

// Key j of sequence b: the cache block and the row within it. Block indices outside the pool
// are clamped (device tables are not validated; the result is then wrong, but no memory outside
// the cache is touched).
__device__ __forceinline__ void cache_slot(const DecodeParams& p, int b, int j, std::int64_t& blk,
                                           std::int64_t& row) {
  if (p.block_table != nullptr) {
    const int page = p.block_div.div(j);
    row = j - page * p.block_size;
    blk = p.block_table[b * p.block_table_stride + page];
  } else {
    blk = p.batch_idx != nullptr ? p.batch_idx[b] : b;
    row = j;
  }
  blk = blk < 0 ? 0 : (blk >= p.num_blocks ? p.num_blocks - 1 : blk);
}

// Row i's visible keys [first, last) among Lk keys of sequence b with Lq query rows
// (bottom-right aligned window; causal is window_right = 0; none below the left padding).
__device__ __forceinline__ void visible_range(const DecodeParams& p, int b, int i, int lq, int lk,
                                              int& first, int& last) {
  const int pos = i + lk - lq;
  first = p.cache_leftpad != nullptr ? max(p.cache_leftpad[b], 0) : 0;
  last = lk;
  if (p.window_left >= 0 && pos - p.window_left > first) first = pos - p.window_left;
  if (p.window_right >= 0 && pos + p.window_right + 1 < last) last = pos + p.window_right + 1;
  if (first > last) first = last;
  if (last < 0) first = last = 0;
}

// tanh in a few instructions (tanhf, inlined at each of a thread's 8 scores, made up a tenth of
// the kernel's code): 1 - 2 / (e^2|y| + 1) with the sign of y; absolute error ~1e-7, which
// softcap * tanh(y) scales to ~1e-6 of a score.
__device__ __forceinline__ float tanh_compact(float y) {
  const float t = 1.0f - __fdividef(2.0f, __expf(2.0f * fabsf(y)) + 1.0f);
  return copysignf(t, y);
}

// The element-by-element loads for rows that 16-byte copies cannot take (unaligned, head dims
// not multiples of 8): out of line, so that the common path's code stays small.
template <typename T, int kDim, int kPitch, int kBlockN, int kThreads>
__device__ __noinline__ void load_kv_elements(const DecodeParams& p, int b, int n0, int k1,
                                              const char* k_base, const char* v_base, T* k_tile,
                                              T* v_tile, int tid) {
  for (int idx = tid; idx < kBlockN * kDim; idx += kThreads) {
    const int row = idx / kDim, col = idx % kDim, j = n0 + row;
    float kx = 0.0f, vx = 0.0f;
    if (j < k1) {
      std::int64_t blk, slot_row;
      cache_slot(p, b, j, blk, slot_row);
      if (col < p.dim)
        kx = load_elem(k_base, blk * p.k_stride_blk + slot_row * p.k_stride_row + col, p.in_type);
      if (col < p.dim_v)
        vx = load_elem(v_base, blk * p.v_stride_blk + slot_row * p.v_stride_row + col, p.in_type);
    }
    k_tile[swizzled<kPitch>(row, col >> 3) + (col & 7)] = MmaType<T>::from_float(kx);
    v_tile[swizzled<kPitch>(row, col >> 3) + (col & 7)] = MmaType<T>::from_float(vx);
  }
}

// Query row i's (sequence b, kv head h) q elements: row pr of the tile is query row pr / group,
// head h * group + pr % group.
__device__ __forceinline__ std::int64_t q_row_offset(const DecodeParams& p, int b, int h,
                                                     int q_first_row, int pr) {
  const int i = p.group_div.div(pr), hq = h * p.group + p.group_div.mod(pr);
  return b * p.q_stride_b + static_cast<std::int64_t>(q_first_row + i) * p.q_stride_l +
         hq * p.q_stride_h;
}

template <typename T, int kDim, int kPitch, int kThreads>
__device__ __noinline__ void load_q_elements(const DecodeParams& p, int b, int h, int q_first_row,
                                             int pr0, int lq, T* q_tile, int tid) {
  const char* const q_base = static_cast<const char*>(p.q);
  for (int idx = tid; idx < kDecodeRows * kDim; idx += kThreads) {
    const int r = idx / kDim, col = idx % kDim, pr = pr0 + r;
    float x = 0.0f;
    if (p.group_div.div(pr) < lq && col < p.dim)
      x = load_elem(q_base, q_row_offset(p, b, h, q_first_row, pr) + col, p.in_type);
    q_tile[swizzled<kPitch>(r, col >> 3) + (col & 7)] = MmaType<T>::from_float(x);
  }
}

template <typename T, int kBucket>
__global__ void __launch_bounds__(decode_config(kBucket).threads(), 2)
    decode_kernel(const __grid_constant__ DecodeParams p) {
  constexpr DecodeConfig cfg = decode_config(kBucket);
  constexpr int kDim = cfg.head_dim, kPitch = cfg.pitch(), kBlockN = cfg.block_n;
  constexpr int kStages = cfg.stages, kThreads = cfg.threads();
  constexpr int kDTiles = kDim / 8;
  constexpr int kChunks = kDim / 8;
  static_assert(kBlockN == 16 * DecodeConfig::kWarps, "each warp takes 16 keys of a block");

  extern __shared__ __align__(128) unsigned char smem[];
  T* const q_tile = reinterpret_cast<T*>(smem);
  T* const kv_tiles = q_tile + kDecodeRows * kPitch;

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  const int split = static_cast<int>(blockIdx.x);
  const int h = static_cast<int>(blockIdx.y) % p.heads_kv;
  const int tile = static_cast<int>(blockIdx.y) / p.heads_kv;
  const int b = static_cast<int>(blockIdx.z);
  const int lq = query_count(p, b), lk = key_count(p, b);
  const int q_first_row = p.cu_seqlens_q != nullptr ? p.cu_seqlens_q[b] : 0;

  const std::int64_t part_row0 =
      ((((static_cast<std::int64_t>(b) * p.heads_kv + h) * p.row_tiles + tile) * p.splits) +
       split) *
      kDecodeRows;
  float* const part_out = p.part_out + part_row0 * p.dim_v;
  float* const part_lse = p.part_lse + part_row0;

  // The tile's rows: packed row pr = tile * 16 + r is query row pr / group, head pr % group.
  const int pr0 = tile * kDecodeRows;
  const int i_first = p.group_div.div(pr0);
  const int i_last = min(lq - 1, p.group_div.div(pr0 + kDecodeRows - 1));
  int lo = lk, hi = 0;  // keys some row of the tile sees
  if (i_first <= i_last) {
    int f, l;
    visible_range(p, b, i_first, lq, lk, f, l);
    lo = f;
    visible_range(p, b, i_last, lq, lk, f, l);
    hi = l;
  }
  const int span_blocks = hi > lo ? (hi - lo + kBlockN - 1) / kBlockN : 0;
  const int split_keys = (span_blocks + p.splits - 1) / p.splits * kBlockN;
  const int k0 = lo + split * split_keys;
  const int k1 = min(hi, k0 + split_keys);
  if (k0 >= k1 && p.splits > 1) {  // nothing to see in this split: an empty part (zeros, so
                                   // that the combine reads every split unconditionally)
    for (int idx = tid; idx < kDecodeRows * p.dim_v; idx += kThreads) {
      const int r = p.dim_v_div.div(idx);
      if (p.group_div.div(pr0 + r) >= lq) continue;
      part_out[idx] = 0.0f;
      if (p.dim_v_div.mod(idx) == 0) part_lse[r] = -INFINITY;
    }
    return;
  }

  // This thread's two rows (g, g + 8): their visible keys within the split.
  int row_first[2], row_last[2];
  bool row_valid[2];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int pr = pr0 + g + 8 * hh, i = p.group_div.div(pr);
    row_valid[hh] = i < lq;
    int f = 0, l = 0;
    if (row_valid[hh]) visible_range(p, b, i, lq, lk, f, l);
    row_first[hh] = max(f, k0);
    row_last[hh] = min(l, k1);
  }
  // Keys every valid row of the tile sees (blocks inside need no per-element masking).
  int all_first = k0, all_last = k1;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh)
    if (row_valid[hh]) {
      all_first = max(all_first, row_first[hh]);
      all_last = min(all_last, row_last[hh]);
    }
  all_first = __reduce_max_sync(0xffffffffu, all_first);
  all_last = __reduce_min_sync(0xffffffffu, all_last);

  const std::int64_t esize = 2;
  const char* const k_base =
      static_cast<const char*>(p.k) + static_cast<std::int64_t>(h) * p.k_stride_h * esize;
  const char* const v_base =
      static_cast<const char*>(p.v) + static_cast<std::int64_t>(h) * p.v_stride_h * esize;

  // A contiguous cache: this thread's chunk of key row j is a fixed stride from that of key 0
  // (pointers built once; a block's rows are then one add each).
  constexpr int kRowStep = kThreads / kChunks;
  const int chunk = tid % kChunks, row0 = tid / kChunks;
  const char* k_row0 = k_base;
  const char* v_row0 = v_base;
  if (p.block_table == nullptr) {
    std::int64_t blk, unused;
    cache_slot(p, b, 0, blk, unused);
    k_row0 = k_base + (blk * p.k_stride_blk + row0 * p.k_stride_row + chunk * 8) * esize;
    v_row0 = v_base + (blk * p.v_stride_blk + row0 * p.v_stride_row + chunk * 8) * esize;
  }
  const std::int64_t k_step = p.k_stride_row * esize, v_step = p.v_stride_row * esize;
  // A paged cache: the sequence's table row, and this thread's chunk within any row.
  const std::int32_t* const table_row =
      p.block_table != nullptr ? p.block_table + b * p.block_table_stride : nullptr;
  const char* const k_chunk_src = k_base + chunk * 8 * esize;
  const char* const v_chunk_src = v_base + chunk * 8 * esize;
  // Byte steps of a paged cache in 32 bits (the host takes element loads where a page's or a
  // page row's bytes would not fit): a row's offset is then one wide multiply-add.
  const int k_page_bytes = static_cast<int>(p.k_stride_blk * esize);
  const int v_page_bytes = static_cast<int>(p.v_stride_blk * esize);
  const int k_row_bytes = static_cast<int>(p.k_stride_row * esize);
  const int v_row_bytes = static_cast<int>(p.v_stride_row * esize);

  // K and V rows of block n0 into slot `slot`: 16-byte copies of gathered rows (zero past k1).
  auto load_kv = [&](int n0, int slot) {
    T* const k_tile = kv_tiles + slot * 2 * kBlockN * kPitch;
    T* const v_tile = k_tile + kBlockN * kPitch;
    if (p.vector_loads) {
      // Thread tid copies 16-byte chunk tid % kChunks of rows tid / kChunks + k * kRowStep.
      // Unrolled so that the block-table reads of all of the thread's rows issue before their
      // copies (a paged cache's page lookups would otherwise serialise with the copies); a
      // contiguous cache's rows are a fixed stride apart (no per-row lookup at all).
      static_assert(kThreads % kChunks == 0 && kBlockN % (kThreads / kChunks) == 0,
                    "whole rounds of 16-byte copies");
      const bool k_col = chunk * 8 < p.dim, v_col = chunk * 8 < p.dim_v;
      if (p.block_table == nullptr) {
        const char* k_src = k_row0 + n0 * k_step;
        const char* v_src = v_row0 + n0 * v_step;
#pragma unroll
        for (int k = 0; k < kBlockN / kRowStep; ++k) {
          const int row = row0 + k * kRowStep;
          const bool key_ok = n0 + row < k1;
          const bool k_ok = key_ok && k_col, v_ok = key_ok && v_col;
          cp_async_16(smem_address(k_tile + swizzled<kPitch>(row, chunk)), k_ok ? k_src : k_base,
                      k_ok ? 16 : 0);
          cp_async_16(smem_address(v_tile + swizzled<kPitch>(row, chunk)), v_ok ? v_src : v_base,
                      v_ok ? 16 : 0);
          k_src += kRowStep * k_step;
          v_src += kRowStep * v_step;
        }
      } else {
        // Paged: each row's page looked up in the sequence's table row (clamped into the pool).
#pragma unroll
        for (int k = 0; k < kBlockN / kRowStep; ++k) {
          const int row = row0 + k * kRowStep, j = n0 + row;
          const bool key_ok = j < k1;
          const int page = p.block_div.div(j);
          const int in_page = j - page * p.block_size;
          const int blk = key_ok ? min(max(table_row[page], 0), p.num_blocks - 1) : 0;
          const bool k_ok = key_ok && k_col, v_ok = key_ok && v_col;
          cp_async_16(smem_address(k_tile + swizzled<kPitch>(row, chunk)),
                      k_ok ? k_chunk_src + static_cast<std::int64_t>(blk) * k_page_bytes +
                                 in_page * k_row_bytes
                           : k_base,
                      k_ok ? 16 : 0);
          cp_async_16(smem_address(v_tile + swizzled<kPitch>(row, chunk)),
                      v_ok ? v_chunk_src + static_cast<std::int64_t>(blk) * v_page_bytes +
                                 in_page * v_row_bytes
                           : v_base,
                      v_ok ? 16 : 0);
        }
      }
    } else {
      load_kv_elements<T, kDim, kPitch, kBlockN, kThreads>(p, b, n0, k1, k_base, v_base, k_tile,
                                                           v_tile, tid);
    }
  };

  // Q: the tile's 16 (row, head) pairs, zero for rows past the sequence's end; 16-byte copies
  // in the first stage's group, else element loads after the pipeline's first copies are issued
  // (loads that would otherwise hold those copies back by their latency).
  const char* const q_base = static_cast<const char*>(p.q);
  if (p.vector_loads_q) {
    static_assert(kDecodeRows * kChunks % kThreads == 0, "whole rounds of 16-byte copies");
#pragma unroll
    for (int idx = tid; idx < kDecodeRows * kChunks; idx += kThreads) {
      const int r = idx / kChunks, chunk = idx % kChunks, pr = pr0 + r;
      const bool ok = p.group_div.div(pr) < lq && chunk * 8 < p.dim;
      cp_async_16(
          smem_address(q_tile + swizzled<kPitch>(r, chunk)),
          ok ? q_base + (q_row_offset(p, b, h, q_first_row, pr) + chunk * 8) * esize : q_base,
          ok ? 16 : 0);
    }
  }
  const int n_blocks = k1 > k0 ? (k1 - k0 + kBlockN - 1) / kBlockN : 0;
  if (!p.vector_loads_q)
    load_q_elements<T, kDim, kPitch, kThreads>(p, b, h, q_first_row, pr0, lq, q_tile, tid);

  float acc_o[kDTiles][4];
#pragma unroll
  for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_o[dt][e] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};

  const bool general = p.softcap > 0.0f || p.alibi != nullptr;
  const float inv_softcap = p.softcap > 0.0f ? 1.0f / p.softcap : 0.0f;
  float slope[2] = {0.0f, 0.0f};
  int alibi_pos[2] = {0, 0};
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int pr = pr0 + g + 8 * hh;
    alibi_pos[hh] = p.group_div.div(pr) + lk - lq;
    if (p.alibi != nullptr)
      slope[hh] =
          p.alibi[b * p.alibi_stride_b + (h * p.group + p.group_div.mod(pr)) * p.alibi_stride_h];
  }

  const int mat = lane / 8, mat_row = lane % 8;
  const int q_row = mat_row + (mat & 1) * 8, q_chunk = mat >> 1;
  const int k_row = warp * 16 + mat_row + (mat >> 1) * 8, k_chunk = mat & 1;
  const int v_row = warp * 16 + mat_row + (mat & 1) * 8, v_chunk = mat >> 1;

  // One loop issues the loads kStages - 1 blocks ahead of the block it computes (its first
  // turns only load), so that load_kv's code appears once: a decode call's few blocks run cold
  // from the instruction cache, and code size is time there.
  for (int it = 0; it < n_blocks + kStages - 1; ++it) {
    const int blk = it - (kStages - 1);
    if (blk >= 0) {
      cp_async_wait<kStages - 2>();
      __syncthreads();
    }
    if (it < n_blocks) load_kv(k0 + it * kBlockN, it % kStages);
    cp_async_commit();
    if (blk < 0) continue;

    T* const k_tile = kv_tiles + (blk % kStages) * 2 * kBlockN * kPitch;
    T* const v_tile = k_tile + kBlockN * kPitch;
    const int n0 = k0 + blk * kBlockN;
    const bool edge = n0 < all_first || n0 + kBlockN > all_last;

    // A block where some row cannot see some key: V rows holding a non-finite element are
    // zeroed and their K rows given a NaN (poison.cuh), so only rows that see them turn NaN.
    if (edge) {
      for (int idx = tid; idx < kBlockN * kChunks; idx += kThreads) {
        const int row = idx / kChunks;
        if (clear_nonfinite_chunk<T>(v_tile + swizzled<kPitch>(row, idx % kChunks)))
          k_tile[swizzled<kPitch>(row, 0)] = nan_element<T>();
      }
      __syncthreads();
    }

    // S = Q K^T for this warp's 16 keys: two n8 tiles.
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int ks = 0; ks < kDim / 16; ++ks) {
      std::uint32_t a[4], kb[4];
      ldmatrix_x4(a, smem_address(q_tile + swizzled<kPitch>(q_row, ks * 2 + q_chunk)));
      ldmatrix_x4(kb, smem_address(k_tile + swizzled<kPitch>(k_row, ks * 2 + k_chunk)));
      mma_16816<T>(s[0], a, kb[0], kb[1]);
      mma_16816<T>(s[1], a, kb[2], kb[3]);
    }

    // Scores in base-2 units, NaN where not finite, -inf where the row cannot see the key.
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[nt][2 * hh + e];
          const int key = n0 + warp * 16 + nt * 8 + 2 * t + e;
          if (general) {
            x = as_score_or_nan(x * p.scale);
            if (p.softcap > 0.0f) x = p.softcap * tanh_compact(x * inv_softcap);
            if (p.alibi != nullptr) x -= slope[hh] * fabsf(static_cast<float>(alibi_pos[hh] - key));
            x *= 1.4426950408889634f;
          } else {
            x = as_score_or_nan(x * p.scale_log2);
          }
          if (edge && (key < row_first[hh] || key >= row_last[hh])) x = -INFINITY;
        }

        // Online softmax over the warp's keys (rows g, g + 8; the quad holds a row's 16 keys).
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float m = fmaxf(fmaxf(s[0][2 * hh], s[0][2 * hh + 1]), fmaxf(s[1][2 * hh], s[1][2 * hh + 1]));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
      m = fmaxf(row_max[hh], m);
      const float base = m == -INFINITY ? 0.0f : m;
      const float rescale = exp2_approx(row_max[hh] - base);
      row_max[hh] = m;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[nt][2 * hh + e];
          x = exp2_approx(x - base);
          sum += x;
        }
      row_sum[hh] = row_sum[hh] * rescale + sum;
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        acc_o[dt][2 * hh] *= rescale;
        acc_o[dt][2 * hh + 1] *= rescale;
      }
    }

    // O += P V: the two n8 tiles of P are the A fragment of one k16 step.
    std::uint32_t pa[4];
    pa[0] = MmaType<T>::pack(s[0][0], s[0][1]);
    pa[1] = MmaType<T>::pack(s[0][2], s[0][3]);
    pa[2] = MmaType<T>::pack(s[1][0], s[1][1]);
    pa[3] = MmaType<T>::pack(s[1][2], s[1][3]);
#pragma unroll
    for (int dp = 0; dp < kDTiles / 2; ++dp) {
      std::uint32_t vb[4];
      ldmatrix_x4_trans(vb, smem_address(v_tile + swizzled<kPitch>(v_row, dp * 2 + v_chunk)));
      mma_16816<T>(acc_o[2 * dp], pa, vb[0], vb[1]);
      mma_16816<T>(acc_o[2 * dp + 1], pa, vb[2], vb[3]);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the pipeline's shared memory becomes the warps' merge buffer

  // Each warp's partial rows: O (unnormalised), max, sum and a poison flag, in shared memory.
  constexpr int kRowPitch = kDim + 4;
  float* const merge = reinterpret_cast<float*>(smem);  // [warps][16][kRowPitch]
  float* const warp_rows = merge + warp * kDecodeRows * kRowPitch;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    float* const row = warp_rows + (g + 8 * hh) * kRowPitch;
    float check = 0.0f;
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
      row[dt * 8 + 2 * t] = acc_o[dt][2 * hh];
      row[dt * 8 + 2 * t + 1] = acc_o[dt][2 * hh + 1];
      if (dt * 8 + 2 * t < p.dim_v) check = fmaf(acc_o[dt][2 * hh], 0.0f, check);
      if (dt * 8 + 2 * t + 1 < p.dim_v) check = fmaf(acc_o[dt][2 * hh + 1], 0.0f, check);
    }
    float l = row_sum[hh];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    check += __shfl_xor_sync(0xffffffffu, check, 1);
    check += __shfl_xor_sync(0xffffffffu, check, 2);
    if (t == 0) {
      row[kDim] = row_max[hh];
      row[kDim + 1] = l;
      row[kDim + 2] = row_poisoned(l, check) ? 1.0f : 0.0f;
    }
  }
  __syncthreads();

  // Merge the warps, for the tile's real rows only: each row's max, total and the warps'
  // weights once (row[kDim + 3 ..]: weight of warp w), then out = weighted sum / total.
  const int rows = min(kDecodeRows, lq * p.group - pr0);
  for (int r = tid; r < rows; r += kThreads) {
    float m = -INFINITY;
    bool poisoned = false;
#pragma unroll
    for (int w = 0; w < DecodeConfig::kWarps; ++w) {
      const float* row = merge + (w * kDecodeRows + r) * kRowPitch;
      m = fmaxf(m, row[kDim]);
      poisoned |= row[kDim + 2] != 0.0f;
    }
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < DecodeConfig::kWarps; ++w) {
      float* row = merge + (w * kDecodeRows + r) * kRowPitch;
      const float weight =
          m == -INFINITY || row[kDim] == -INFINITY ? 0.0f : exp2_approx(row[kDim] - m);
      total += row[kDim + 1] * weight;
      row[kDim + 3] = weight;
    }
    float* const row0 = merge + r * kRowPitch;
    row0[kDim + 1] = total;  // warp 0's sum is no longer needed
    row0[kDim + 2] = poisoned ? 1.0f : 0.0f;
    row0[kDim] = m;
  }
  __syncthreads();
  for (int idx = tid; idx < rows * p.dim_v; idx += kThreads) {
    const int r = p.dim_v_div.div(idx), d = p.dim_v_div.mod(idx);
    const float* const row0 = merge + r * kRowPitch;
    const float m = row0[kDim], total = row0[kDim + 1];
    const bool poisoned = row0[kDim + 2] != 0.0f;
    float acc = 0.0f;
#pragma unroll
    for (int w = 0; w < DecodeConfig::kWarps; ++w) {
      const float* row = merge + (w * kDecodeRows + r) * kRowPitch;
      acc += row[d] * row[kDim + 3];
    }
    const int pr = pr0 + r, i = p.group_div.div(pr);
    const float value = poisoned ? NAN : (total > 0.0f ? acc * __frcp_rn(total) : 0.0f);
    const float lse =
        poisoned ? NAN : (total > 0.0f ? (m + __log2f(total)) * 0.6931471805599453f : -INFINITY);
    if (p.splits > 1) {
      part_out[r * p.dim_v + d] = value;
      if (d == 0) part_lse[r] = lse;
      continue;
    }
    // The keys are not split: this is the result.
    const int hq = h * p.group + p.group_div.mod(pr);
    const std::int64_t q_row = q_first_row + i;
    store_elem(p.out, b * p.o_stride_b + q_row * p.o_stride_l + hq * p.o_stride_h + d, p.out_type,
               value);
    if (d == 0 && p.lse != nullptr)
      p.lse[b * p.lse_stride_b + hq * p.lse_stride_h + q_row * p.lse_stride_l] = lse;
  }
}

}  // namespace tileattn::cuda
