// Host launch of the sm90 backward: TMA descriptors of Q, K, V and dO, then the prepare kernel,
// the sm90 kernel (a CTA per (key block, kv head, batch) tile, or persistent CTAs), and the dq
// conversion.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "cuda/common/launch.cuh"
#include "cuda/sm90/flash_bwd_sm90.cuh"
#include "cuda/sm90/flash_bwd_sm90_launch.hpp"
#include "cuda/sm90/tensor_maps.hpp"

namespace tileattn::cuda {

// Unset: fallback; "0": false; anything else: true.
inline bool sm90_bwd_option(const char* name, bool fallback) {
  const char* value = std::getenv(name);
  return value == nullptr ? fallback : std::strcmp(value, "0") != 0;
}
// Unset or not a positive number: 0.
inline long sm90_bwd_count(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? 0 : std::max(0L, std::atol(value));
}

template <typename T, int kBucket>
cudaError_t launch_flash_bwd_sm90(const FlashBwdParams& call, cudaStream_t stream) {
  constexpr Sm90BwdTileConfig cfg = sm90_bwd_tile_config(kBucket);
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  FlashBwdParams p = call;
  p.dq_tile_cols = kBucket / 2;  // dq_accum in the tiled layout (dq_layout.cuh)
  Sm90BwdParams params{};
  params.base = p;
  if (!encode_tile_map(&params.q_map, p.q, bf16, p.dim, p.len_q, p.heads_q, p.batch,
                       p.q_stride_l, p.q_stride_h, p.q_stride_b, cfg.block_m) ||
      !encode_tile_map(&params.do_map, p.dout, bf16, p.dim_v, p.len_q, p.heads_q, p.batch,
                       p.do_stride_l, p.do_stride_h, p.do_stride_b, cfg.block_m) ||
      !encode_tile_map(&params.k_map, p.k, bf16, p.dim, p.len_k, p.heads_kv, p.batch,
                       p.k_stride_l, p.k_stride_h, p.k_stride_b, cfg.block_n) ||
      !encode_tile_map(&params.v_map, p.v, bf16, p.dim_v, p.len_k, p.heads_kv, p.batch,
                       p.v_stride_l, p.v_stride_h, p.v_stride_b, cfg.block_n))
    return cudaErrorNotSupported;
  cudaError_t status = launch_flash_bwd_prepare<T>(p, stream);
  if (status != cudaSuccess) return status;
  const std::int64_t tiles = static_cast<std::int64_t>(p.num_n_blocks) * p.heads_kv * p.batch;
  params.num_tiles = static_cast<int>(tiles);
  if (tiles > 0) {
    // Persistent CTAs (one per SM): a CTA's next K / V load and first Q / dO loads run under
    // its dK / dV epilogue. Every tile has the same steps without masks or key lengths;
    // causal and window masks make them uneven, and the CTAs take them in pairs whose steps add
    // up to about the same (common/bwd_tile_order.cuh). Key lengths vary per batch entry
    // without such an order: one CTA per tile, which the hardware schedules.
    // TILEATTN_SM90_BWD_PERSISTENT=0: one CTA per tile always; ..._PERSISTENT_MASKED=0: not
    // with masks; TILEATTN_SM90_BWD_CTAS=n: at most n CTAs whatever the options (the tests use
    // it to give every CTA several tiles, empty ones too, on small shapes).
    const bool masked = p.window_left >= 0 || p.window_right >= 0;
    const bool persistent =
        p.key_lengths == nullptr && sm90_bwd_option("TILEATTN_SM90_BWD_PERSISTENT", true) &&
        (!masked || sm90_bwd_option("TILEATTN_SM90_BWD_PERSISTENT_MASKED", true));
    unsigned ctas = static_cast<unsigned>(tiles);
    if (const long forced = sm90_bwd_count("TILEATTN_SM90_BWD_CTAS"); forced > 0) {
      ctas = static_cast<unsigned>(std::min<long>(ctas, forced));
    } else if (persistent) {
      int device = 0, sms = 0;
      status = cudaGetDevice(&device);
      if (status == cudaSuccess)
        status = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
      if (status != cudaSuccess) return status;
      ctas = std::min(ctas, static_cast<unsigned>(sms));
    }
    params.paired = masked && ctas < tiles ? 1 : 0;
    status = launch_kernel(&flash_bwd_sm90_kernel<T, kBucket>, cfg, params, ctas, stream);
    if (status != cudaSuccess) return status;
  }
  return launch_flash_bwd_convert_dq<kBucket>(p, stream);
}

#define TILEATTN_DEFINE_FLASH_BWD_SM90(T, bucket) \
  template cudaError_t launch_flash_bwd_sm90<T, bucket>(const FlashBwdParams&, cudaStream_t);

}  // namespace tileattn::cuda
