// Host launch of the sm90 backward: TMA descriptors of Q, K, V and dO, then the prepare kernel,
// one CTA per (key block, kv head, batch) of the sm90 kernel, and the dq conversion.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/common/bwd_cta_order.cuh"
#include "cuda/common/bwd_prepare_convert.cuh"
#include "cuda/common/launch.cuh"
#include "cuda/sm90/flash_bwd_sm90.cuh"
#include "cuda/sm90/flash_bwd_sm90_launch.hpp"
#include "cuda/sm90/tensor_maps.hpp"

namespace tileattn::cuda {

template <typename T, int kBucket>
cudaError_t launch_flash_bwd_sm90(const FlashBwdParams& call, cudaStream_t stream) {
  constexpr Sm90BwdTileConfig cfg = sm90_bwd_tile_config(kBucket);
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  FlashBwdParams p = call;
  p.dq_tile_cols = cfg.dq_cols();  // dq_accum in the tiled layout (dq_layout.cuh)
  // The CTA order: key blocks longest first within sections of pairs under a causal band, the
  // sm80 kernels' rule.
  p.cta_section_pairs = bwd_section_pairs_for(p, 1, kBucket);
  Sm90BwdParams params{};
  params.base = p;
  // A varlen batch: the maps span the packed rows as one batch entry (as in the forward).
  const bool varlen = p.cu_seqlens_q != nullptr;
  const int map_batch = varlen ? 1 : p.batch;
  const int rows_q = varlen ? p.total_q : p.len_q, rows_k = varlen ? p.total_k : p.len_k;
  if (!encode_tile_map(&params.q_map, p.q, bf16, p.dim, rows_q, p.heads_q, map_batch, p.q_stride_l,
                       p.q_stride_h, p.q_stride_b, cfg.block_m) ||
      !encode_tile_map(&params.do_map, p.dout, bf16, p.dim_v, rows_q, p.heads_q, map_batch,
                       p.do_stride_l, p.do_stride_h, p.do_stride_b, cfg.block_m) ||
      !encode_tile_map(&params.k_map, p.k, bf16, p.dim, rows_k, p.heads_kv, map_batch, p.k_stride_l,
                       p.k_stride_h, p.k_stride_b, cfg.block_n) ||
      !encode_tile_map(&params.v_map, p.v, bf16, p.dim_v, rows_k, p.heads_kv, map_batch,
                       p.v_stride_l, p.v_stride_h, p.v_stride_b, cfg.block_n))
    return cudaErrorNotSupported;
  cudaError_t status = launch_flash_bwd_prepare<T>(p, stream);
  if (status != cudaSuccess) return status;
  const std::int64_t ctas = static_cast<std::int64_t>(p.num_n_blocks) * p.heads_kv * p.batch;
  if (ctas > 0) {
    status = p.dq_turn != nullptr ? launch_kernel(&flash_bwd_sm90_kernel<T, kBucket, true>, cfg,
                                                  params, static_cast<unsigned>(ctas), stream)
                                  : launch_kernel(&flash_bwd_sm90_kernel<T, kBucket, false>, cfg,
                                                  params, static_cast<unsigned>(ctas), stream);
    if (status != cudaSuccess) return status;
  }
  return launch_flash_bwd_convert_dq<kBucket>(p, stream);
}

#define TILEATTN_DEFINE_FLASH_BWD_SM90(T, bucket) \
  template cudaError_t launch_flash_bwd_sm90<T, bucket>(const FlashBwdParams&, cudaStream_t);

}  // namespace tileattn::cuda
