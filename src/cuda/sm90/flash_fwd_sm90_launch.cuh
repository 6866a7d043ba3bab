// Host launch of the sm90 kernel: TMA descriptors of Q, K and V, then one CTA per query block.
#pragma once

#include <type_traits>

#include "cuda/sm90/flash_fwd_sm90.cuh"
#include "cuda/sm90/flash_fwd_sm90_launch.hpp"
#include "cuda/sm90/tensor_maps.hpp"

namespace tileattn::cuda {

template <typename T, int kBucket, bool kGeneral>
cudaError_t launch_flash_fwd_sm90(const FlashFwdParams& p, cudaStream_t stream) {
  constexpr Sm90TileConfig cfg = sm90_tile_config(kBucket);
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  Sm90FwdParams params{};
  params.base = p;
  const int heads_kv = p.heads_q / p.heads_per_kv;
  if (!encode_tile_map(&params.q_map, p.q, bf16, p.dim, p.len_q, p.heads_q, p.batch,
                       p.q_stride_l, p.q_stride_h, p.q_stride_b, cfg.block_m) ||
      !encode_tile_map(&params.k_map, p.k, bf16, p.dim, p.len_k, heads_kv, p.batch,
                       p.k_stride_l, p.k_stride_h, p.k_stride_b, cfg.block_n) ||
      !encode_tile_map(&params.v_map, p.v, bf16, p.dim_v, p.len_k, heads_kv, p.batch,
                       p.v_stride_l, p.v_stride_h, p.v_stride_b, cfg.block_n))
    return cudaErrorNotSupported;
  return launch_over_query_blocks(&flash_fwd_sm90_kernel<T, kBucket, kGeneral>, cfg, params, p,
                                  stream);
}

#define TILEATTN_DEFINE_FLASH_FWD_SM90(T, bucket, general) \
  template cudaError_t launch_flash_fwd_sm90<T, bucket, general>(const FlashFwdParams&, cudaStream_t);

}  // namespace tileattn::cuda
