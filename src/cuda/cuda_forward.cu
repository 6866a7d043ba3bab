// Host side of the CUDA backend: AttnParams -> FlashFwdParams, choice of the instantiation
// (element type, head-dim bucket, fast or general score path), launch, error reporting.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include "cuda/common/flash_fwd_params.hpp"
#include "cuda/cuda_forward.hpp"
#include "cuda/cuda_host.hpp"
#include "cuda/f32/f32_host.hpp"
#include "cuda/sm80/flash_fwd_launch.hpp"
#include "cuda/sm80/tile_config.hpp"
#include "cuda/sm90/flash_fwd_sm90_launch.hpp"
#include "cuda/sm90/tile_config.hpp"

namespace tileattn::detail {
namespace {

using cuda::FlashFwdParams;

template <typename T, int kBucket>
cudaError_t launch_bucket(const FlashFwdParams& k, bool general, cudaStream_t stream) {
  return general ? cuda::launch_flash_fwd<T, kBucket, true>(k, stream)
                 : cuda::launch_flash_fwd<T, kBucket, false>(k, stream);
}

// f32 inputs run the bf16 kernel: tiles are converted to bf16 on load (f32 accumulation).
template <typename T>
cudaError_t launch_type(int bucket, const FlashFwdParams& k, bool general, cudaStream_t stream) {
  switch (bucket) {
    case 64: return launch_bucket<T, 64>(k, general, stream);
    case 96: return launch_bucket<T, 96>(k, general, stream);
    case 128: return launch_bucket<T, 128>(k, general, stream);
    case 192: return launch_bucket<T, 192>(k, general, stream);
    default: return launch_bucket<T, 256>(k, general, stream);
  }
}

template <typename T, bool kGeneral>
cudaError_t launch_sm90(int bucket, const FlashFwdParams& k, cudaStream_t stream) {
  switch (bucket) {
    case 64: return cuda::launch_flash_fwd_sm90<T, 64, kGeneral>(k, stream);
    case 128: return cuda::launch_flash_fwd_sm90<T, 128, kGeneral>(k, stream);
    default: return cuda::launch_flash_fwd_sm90<T, 256, kGeneral>(k, stream);
  }
}

// The sm90 kernel for 16-bit storage with 16-byte aligned rows; the fast score path needs
// scale > 0 (its softmax max is taken on raw scores). Returns cudaErrorNotSupported, launching
// nothing, when TMA cannot describe the tensors.
cudaError_t try_sm90(const AttnParams& p, bool general, cudaStream_t stream) {
  if (p.dtype == DType::f32 || !vector_loads_ok(p) || !use_sm90(p.device_index))
    return cudaErrorNotSupported;
  general = general || !(p.scale > 0.0f);
  const int bucket = cuda::sm90_bucket(static_cast<int>(std::max(p.dim, p.dim_v)));
  const FlashFwdParams k = make_fwd_params(p, cuda::sm90_tile_config(bucket).block_m);
  if (p.dtype == DType::f16)
    return general ? launch_sm90<__half, true>(bucket, k, stream)
                   : launch_sm90<__half, false>(bucket, k, stream);
  return general ? launch_sm90<__nv_bfloat16, true>(bucket, k, stream)
                 : launch_sm90<__nv_bfloat16, false>(bucket, k, stream);
}

}  // namespace

void cuda_flash_forward(const AttnParams& p, void* stream, bool f32_via_bf16) {
  if (p.len_q == 0) return;
  if (p.dtype == DType::f32 && !f32_via_bf16) return cuda_f32_forward(p, stream);
  const int bucket = cuda::head_dim_bucket(static_cast<int>(std::max(p.dim, p.dim_v)));
  const cuda::TileConfig cfg = cuda::tile_config(bucket);
  const std::int64_t m_blocks = (p.len_q + cfg.block_m - 1) / cfg.block_m;
  if (p.len_q > INT_MAX - 256 || p.len_k > INT_MAX - 256 || p.total_q > INT_MAX - 256 ||
      p.total_k > INT_MAX - 256 || m_blocks * p.heads_q * p.batch > INT_MAX)
    throw Error(
        "tileattn: argument 'q': the CUDA backend supports sequence lengths and "
        "batch x heads x query blocks below 2^31");

  const bool general =
      p.mask != nullptr || p.softcap > 0.0f || p.alibi_slopes != nullptr || p.has_dropout();
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  DeviceGuard guard(p.device_index);
  cudaError_t status = try_sm90(p, general, cuda_stream);
  if (status == cudaErrorNotSupported) {
    const FlashFwdParams k = make_fwd_params(p, cfg.block_m);
    status = p.dtype == DType::f16 ? launch_type<__half>(bucket, k, general, cuda_stream)
                                   : launch_type<__nv_bfloat16>(bucket, k, general, cuda_stream);
  }
  if (status != cudaSuccess) throw_cuda("kernel launch", status);
}

}  // namespace tileattn::detail
