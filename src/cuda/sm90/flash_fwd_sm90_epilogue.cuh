// The sm90 forward's epilogue, per consumer warpgroup and tile: O / l, staged through shared
// memory (16-byte chunks XOR-swizzled by row, so the fragment writes are free of bank
// conflicts) and written by TMA stores (or, without Sm90TileConfig::tma_store, coalesced 16-byte
// stores) where the output is 16-bit with aligned rows; any other output element by element from
// the registers. The logsumexp goes first.
//
// The row values (1 / l, the logsumexp) and the first wait for the staging buffer run, where
// the configuration says so (early_epilogue_rows), while the tile's last P V runs
// (Sm90FwdMainloop::finish) rather than after it: after it, 1 / l waits ~500 clocks behind the
// other warpgroup's exponentials in the MUFU queue and the buffer ~250 (clock trace, D 64,
// L 1024).
//
// Where ptxas spills (K::kRereadCoords), lane, warp and tile coordinates are read afresh here
// (thread_index_now, the warp's out_coords slot, written by publish_rows at the tile's start)
// instead of being held across the main loop: with shared memory taking nearly all of L1, the
// spill reloads go to L2 (long-scoreboard stalls of hundreds of cycles per tile at D = 256). The
// kernels without spills keep them in registers (re-reading costs them 1-2% at L = 1024).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "cuda/common/elements.cuh"
#include "cuda/common/poison.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/sm90/async.cuh"
#include "cuda/sm90/flash_fwd_sm90_smem.cuh"
#include "cuda/sm90/flash_fwd_sm90_softmax.cuh"
#include "cuda/sm90/flash_fwd_sm90_trace.cuh"
#include "cuda/sm90/flash_fwd_sm90_traits.cuh"

namespace tileattn::cuda {

template <class K>
struct Sm90FwdEpilogue {
  using T = typename K::Element;
  using OFragment = typename K::OFragment;

  // The last TMA store (the previous tile's or pass's) has read warpgroup `group`'s staging
  // buffer, and every thread of the warpgroup knows it.
  __device__ __forceinline__ static void wait_stage_free(const Sm90FwdParams& params, int group) {
    if (params.o_tma && thread_index_now() % 128 == 0) bulk_wait_all<true>();
    named_barrier_sync(K::kStageBarrier + group, 128);
  }

  // At a tile's start (K::kRereadCoords), by the whole warp: its rows' batch entry, head, first
  // row and row end into its out_coords slot (Sm90Barriers) for store().
  __device__ __forceinline__ static void publish_rows(int* slot, int lane, int b, int h,
                                                      int warp_row0, int row_end) {
    __syncwarp();  // the previous tile's epilogue has read the slot
    if (lane == 0) {
      slot[0] = b;
      slot[1] = h;
      slot[2] = warp_row0;
      slot[3] = row_end;
    }
    __syncwarp();
  }

  // The tile's logsumexp and output. acc_o: O unnormalised; inv_sum, row_lse: the row values if
  // computed already (K::kEarlyRows), else computed here from the softmax; stage_free: the
  // staging buffer's first wait is done. warp (consumer warp 0..7), lane, b, h, warp_row0 (the
  // warp's first row) and row_end (the end of the tile's sequence), both rows of the tensors
  // (a varlen sequence's packed rows): the values held across the main loop, unused where
  // re-read.
  __device__ __forceinline__ static void store(
      const Sm90FwdParams& params, T* const o_stage, OFragment& acc_o,
      const Sm90OnlineSoftmax<K>& softmax, float (&inv_sum)[2], float (&row_lse)[2],
      const bool stage_free, const int warp, const int lane, const int b, const int h,
      const int warp_row0, const int row_end, const Sm90FwdTrace& trace, const int q_pass) {
    extern __shared__ unsigned char smem_raw[];
    const FlashFwdParams& p = params.base;
    int e_warp, e_lane, e_b, e_h, e_warp_row0, e_row_end;  // e_warp: consumer warp 0..7
    if constexpr (K::kRereadCoords) {
      const unsigned tid = static_cast<unsigned>(thread_index_now());
      e_warp = static_cast<int>(tid / 32u) - 4;
      e_lane = static_cast<int>(tid % 32u);
      const std::uint32_t slot =  // shared address of bars.out_coords[e_warp], from the symbol
          ((smem_address(smem_raw) + 1023u) & ~1023u) + Sm90FwdSmem<K>::kBarsOffset +
          static_cast<std::uint32_t>(offsetof(Sm90Barriers<K::kStages>, out_coords)) + e_warp * 16u;
      e_b = ld_shared_volatile(slot);
      e_h = ld_shared_volatile(slot + 4);
      e_warp_row0 = ld_shared_volatile(slot + 8);
      e_row_end = ld_shared_volatile(slot + 12);
    } else {
      e_warp = warp;
      e_lane = lane;
      e_b = b;
      e_h = h;
      e_warp_row0 = warp_row0;
      e_row_end = row_end;
    }
    const int e_g = e_lane / 4, e_t = e_lane % 4;
    const int e_row0 = e_warp_row0 + e_g;  // rows e_row0, e_row0 + 8
    if constexpr (!K::kEarlyRows) softmax.row_values(inv_sum, row_lse);
      // A poisoned row (a visible non-finite score made its sum NaN, or a visible non-finite V
      // its output) is NaN throughout, lse included.
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float check = 0.0f;
#pragma unroll
      for (int dt = 0; dt < K::kDTiles; ++dt)
        check = fmaf(acc_o[dt][2 * hh], 0.0f, fmaf(acc_o[dt][2 * hh + 1], 0.0f, check));
      check += __shfl_xor_sync(0xffffffffu, check, 1);
      check += __shfl_xor_sync(0xffffffffu, check, 2);
      if (row_poisoned(row_lse[hh], check)) {
        inv_sum[hh] = NAN;
        row_lse[hh] = NAN;
      }
    }
    trace.tile(q_pass, 5);
    // The logsumexp first: two stores that need only the row values, issued before the staging
    // (after it they waited behind the TMA issue and the element path's set-up).
    if (p.lse != nullptr && e_t == 0) {
      float* lse_rows = p.lse + e_b * p.lse_stride_b + e_h * p.lse_stride_h;
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int i = e_row0 + 8 * hh;
        if (i < e_row_end) lse_rows[i * p.lse_stride_l] = row_lse[hh];
      }
    }
    bool stored = false;
    if constexpr (K::cfg.o_stage_bytes() > 0) {
      if (p.vector_stores) {
        store_staged(params, o_stage, acc_o, inv_sum, stage_free, e_warp, e_lane, e_g, e_t, e_b,
                     e_h, e_warp_row0, e_row_end, trace, q_pass);
        stored = true;
      }
    }
    if (!stored) store_elements(p, acc_o, inv_sum, e_b, e_h, e_row0, e_row_end, e_t);
  }

  // After the last tile: the last TMA stores read shared memory, which must outlive them (a
  // no-op in threads that issued none).
  __device__ __forceinline__ static void drain(const Sm90FwdParams& params) {
    if (params.o_tma) bulk_wait_all<false>();
  }

 private:
  // The warpgroup's 64 rows in column blocks of (64 rows, 64 columns), each row's 16-byte chunks
  // XOR-swizzled by row: the TMA map's 128-byte swizzle. kStageCols columns per pass (D 256: two
  // passes through one buffer). The e_ values: as in store().
  __device__ __forceinline__ static void store_staged(const Sm90FwdParams& params, T* const o_stage,
                                                      OFragment& acc_o, const float (&inv_sum)[2],
                                                      const bool stage_free, const int e_warp,
                                                      const int e_lane, const int e_g,
                                                      const int e_t, const int e_b, const int e_h,
                                                      const int e_warp_row0, const int e_row_end,
                                                      const Sm90FwdTrace& trace, const int q_pass) {
    const FlashFwdParams& p = params.base;
    constexpr int kStageCols = K::cfg.o_stage_cols(), kPassTiles = kStageCols / 8;
    constexpr int kChunks = kStageCols / 8;  // 16-byte chunks per row and pass
    const int e_group = e_warp / 4;
    T* stage = o_stage + e_group * 64 * kStageCols;
    // Explicit shared-memory accesses: through the generic pointer ptxas emitted generic
    // (64-bit address) stores and loads.
    const std::uint32_t stage_address = smem_address(stage);
    const int stage_barrier = K::kStageBarrier + e_group;
    const bool store_issuer = e_warp % 4 == 0 && e_lane == 0;
#pragma unroll
    for (int pass = 0; pass < K::kDim / kStageCols; ++pass) {
      // The last TMA store (the previous pass's or tile's) has read the buffer, and every
      // thread's reads of it are done (the first pass: in Sm90FwdMainloop::finish, unless the
      // warpgroup computed no key block or the rows come late).
      if (pass > 0 || !stage_free) wait_stage_free(params, e_group);
      trace.tile(q_pass, 6);
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int r = (e_warp % 4) * 16 + e_g + 8 * hh;
#pragma unroll
        for (int dt = 0; dt < kPassTiles; ++dt) {
          const int d_tile = pass * kPassTiles + dt;
          store_shared_u32(stage_at(stage_address, r, dt) + 4 * e_t,
                           MmaType<T>::pack(acc_o[d_tile][2 * hh] * inv_sum[hh],
                                            acc_o[d_tile][2 * hh + 1] * inv_sum[hh]));
        }
      }
      if (params.o_tma) fence_proxy_async_shared();  // the writes, to the TMA store
      named_barrier_sync(stage_barrier, 128);
      trace.tile(q_pass, 7);
      const int row_base = e_warp_row0 - (e_warp % 4) * 16;
      if (params.o_tma) {
        if (store_issuer) {
#pragma unroll
          for (int cb = 0; cb < kStageCols / 64; ++cb)
            tma_store_4d(&params.o_map, stage + cb * 64 * 64, pass * kStageCols + cb * 64, row_base,
                         e_h, e_b);
          bulk_commit_group();
        }
        trace.tile(q_pass, 8);
      } else {
        T* out =
            static_cast<T*>(p.out) + e_b * p.o_stride_b + e_h * p.o_stride_h + pass * kStageCols;
#pragma unroll
        for (int idx = e_lane + (e_warp % 4) * 32; idx < 64 * kChunks; idx += 128) {
          const int r = idx / kChunks, c = idx % kChunks;
          // (The condition as a named value: as a branch condition nvcc keeps two branches.)
          const bool inside = row_base + r < e_row_end && pass * kStageCols + c * 8 < p.dim_v;
          if (inside)
            *reinterpret_cast<uint4*>(out + static_cast<std::int64_t>(row_base + r) * p.o_stride_l +
                                      c * 8) = load_shared_v4u(stage_at(stage_address, r, c));
        }
      }
    }
  }

  // The shared-window address of 16-byte chunk `chunk` of staging row r.
  __device__ __forceinline__ static std::uint32_t stage_at(std::uint32_t stage_address, int r,
                                                           int chunk) {
    const int element = (chunk / 8) * 64 * 64 + r * 64 + ((chunk % 8) ^ (r & 7)) * 8;
    return stage_address + static_cast<std::uint32_t>(element * sizeof(T));
  }

  // Element-wise stores from the registers (no staging buffer, or odd strides).
  __device__ __forceinline__ static void store_elements(const FlashFwdParams& p, OFragment& acc_o,
                                                        const float (&inv_sum)[2], const int e_b,
                                                        const int e_h, const int e_row0,
                                                        const int e_row_end, const int e_t) {
    char* out_base = static_cast<char*>(p.out);
    const std::int64_t out_esize = p.out_type == ElemType::f32 ? 4 : 2;
    out_base += (e_b * p.o_stride_b + e_h * p.o_stride_h) * out_esize;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float inv = inv_sum[hh];
      const int i = e_row0 + 8 * hh;
      if (i >= e_row_end) continue;
      char* out_row = out_base + static_cast<std::int64_t>(i) * p.o_stride_l * out_esize;
#pragma unroll
      for (int dt = 0; dt < K::kDTiles; ++dt) {
        const int col = dt * 8 + 2 * e_t;
        const float x = acc_o[dt][2 * hh] * inv, y = acc_o[dt][2 * hh + 1] * inv;
        const bool pair = p.pair_stores && col + 1 < p.dim_v;
        if (pair) {
          store_pair(out_row, col, p.out_type, x, y);
        } else {
          if (col < p.dim_v) store_elem(out_row, col, p.out_type, x);
          if (col + 1 < p.dim_v) store_elem(out_row, col + 1, p.out_type, y);
        }
      }
    }
  }
};

}  // namespace tileattn::cuda
