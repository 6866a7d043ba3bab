// Host launch of the sm90 kernel: TMA descriptors of Q, K and V, then one CTA per query block.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "cuda/common/launch.cuh"
#include "cuda/sm90/flash_fwd_sm90.cuh"
#include "cuda/sm90/flash_fwd_sm90_launch.hpp"
#include "cuda/sm90/tensor_maps.hpp"

namespace tileattn::cuda {

inline std::atomic<unsigned> g_sm90_launches{0};  // picks each launch's scheduler slot

// The launch choices (persistent grid, scheduling groups, ping-pong turns, L2 hint, lazy
// rescaling, output staging and TMA stores) are fields of the bucket's Sm90TileConfig
// (sm90/tile_config.hpp).
template <typename T, int kBucket, bool kGeneral>
cudaError_t launch_flash_fwd_sm90(const FlashFwdParams& p, cudaStream_t stream) {
  constexpr Sm90TileConfig cfg = sm90_tile_config(kBucket);
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  Sm90FwdParams params{};
  params.base = p;
  // Without staging: the output from the registers, element pairs.
  if constexpr (!cfg.stage_output) params.base.vector_stores = false;
  const int heads_kv = p.heads_q / p.heads_per_kv;
  // A varlen batch: the maps span the packed rows as one batch entry; a sequence's tiles start
  // at its first row, and its key blocks may read on into the next sequence's keys, which its
  // key length masks.
  const bool varlen = p.cu_seqlens_q != nullptr;
  const int map_batch = varlen ? 1 : p.batch;
  const int rows_q = varlen ? p.total_q : p.len_q, rows_k = varlen ? p.total_k : p.len_k;
  if (!encode_tile_map(&params.q_map, p.q, bf16, p.dim, rows_q, p.heads_q, map_batch, p.q_stride_l,
                       p.q_stride_h, p.q_stride_b, 64) ||  // per warpgroup
      !encode_tile_map(&params.k_map, p.k, bf16, p.dim, rows_k, heads_kv, map_batch, p.k_stride_l,
                       p.k_stride_h, p.k_stride_b, cfg.block_n) ||
      !encode_tile_map(&params.v_map, p.v, bf16, p.dim_v, rows_k, heads_kv, map_batch, p.v_stride_l,
                       p.v_stride_h, p.v_stride_b, cfg.block_n))
    return cudaErrorNotSupported;
  // The output by TMA stores from the staging buffer where there is one and 16-byte stores are
  // legal (out type T, aligned rows), unless the configuration asks for 16-byte stores. A store
  // copies the 16-bit elements as they are, so the map's bf16 type serves f16 output too.
  // (Not for a varlen batch: a TMA store is bounded by the tensor, not by the sequence.)
  params.o_tma = !varlen && cfg.o_stage_bytes() > 0 && params.base.vector_stores && cfg.tma_store &&
                 encode_tile_map(&params.o_map, p.out, bf16, p.dim_v, p.len_q, p.heads_q, p.batch,
                                 p.o_stride_l, p.o_stride_h, p.o_stride_b, 64);
  params.num_tiles = static_cast<int>(query_block_count(p));
  // Scheduling groups: (batch, head) pairs whose K and V together take about
  // cfg.schedule_group_mib, so the CTAs running at one time mostly hit L2.
  const std::int64_t kv_bytes_per_pair =
      static_cast<std::int64_t>(p.len_k) * (p.dim + p.dim_v) * 2 + 1;
  const std::int64_t group_bytes = std::int64_t{cfg.schedule_group_mib} << 20;
  params.group_heads = static_cast<int>(std::clamp<std::int64_t>(
      group_bytes / kv_bytes_per_pair, 1, std::int64_t{p.batch} * p.heads_q));
  params.ping_pong = cfg.ping_pong;
  params.first_turn = cfg.first_turn;
  params.finish_turn = cfg.finish_turn;
  params.kv_evict_last = cfg.kv_evict_last;
  params.early_claim = p.window_left < 0 && p.window_right < 0;  // no causal / window band
  params.rescale_threshold = cfg.rescale_threshold;
  // Persistent: one CTA per SM (at most g_sm90_max_ctas), each taking tiles from the launch's
  // counter until none are left.
  params.sched_slot = g_sm90_launches.fetch_add(1, std::memory_order_relaxed) % kSchedulerSlots;
  int device = 0, sms = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status == cudaSuccess)
    status = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (status != cudaSuccess) return status;
  const unsigned tiles = static_cast<unsigned>(params.num_tiles);
  const unsigned max_ctas = g_sm90_max_ctas.load(std::memory_order_relaxed);
  const unsigned ctas = max_ctas > 0 ? max_ctas : static_cast<unsigned>(sms);
  const unsigned blocks =
      cfg.persistent ? std::min({tiles, static_cast<unsigned>(sms), ctas}) : tiles;
  // The score policy (flash_fwd_sm90_scores.cuh): the dispatcher's kGeneral, by name.
  using Scores = std::conditional_t<kGeneral, GeneralScores, CausalWindowScores>;
  const cudaError_t launched =
      launch_kernel(&flash_fwd_sm90_kernel<T, kBucket, Scores>, cfg, params, blocks, stream);
#ifdef TILEATTN_FWD_TRACE
  print_fwd_trace_kernel<<<1, 1, 0, stream>>>();
#endif
  return launched;
}

#define TILEATTN_DEFINE_FLASH_FWD_SM90(T, bucket, general)                              \
  template cudaError_t launch_flash_fwd_sm90<T, bucket, general>(const FlashFwdParams&, \
                                                                 cudaStream_t);

}  // namespace tileattn::cuda
