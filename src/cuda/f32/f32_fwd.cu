// Host side of the f32 forward: AttnParams -> FlashFwdParams (query blocks of the bucket's
// block_m), choice of the head-dim bucket, launch. Device code: f32_fwd_kernel.cuh.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "cuda/cuda_host.hpp"
#include "cuda/f32/f32_config.hpp"
#include "cuda/f32/f32_fwd_kernel.cuh"
#include "cuda/f32/f32_host.hpp"
#include "cuda/f32/f32_launch.cuh"

namespace tileattn::detail {
namespace {

template <int kBucket>
cudaError_t launch_forward(const AttnParams& p, cudaStream_t stream) {
  using namespace cuda::f32;
  const cuda::FlashFwdParams k = make_fwd_params(p, fwd_tiles(kBucket).block_m);
  return launch_f32(&f32_fwd_kernel<kBucket>, fwd_smem_bytes(kBucket),
                    static_cast<unsigned>(k.num_m_blocks) * static_cast<unsigned>(k.heads_q) *
                        static_cast<unsigned>(k.batch),
                    k, stream);
}

}  // namespace

void cuda_f32_forward(const AttnParams& p, void* stream) {
  if (p.len_q == 0) return;
  const int bucket = cuda::f32::head_dim_bucket(static_cast<int>(std::max(p.dim, p.dim_v)));
  const std::int64_t m_blocks = (p.len_q + 63) / 64;
  if (p.len_q > INT_MAX - 256 || p.len_k > INT_MAX - 256 ||
      m_blocks * p.heads_q * p.batch > INT_MAX)
    throw Error(
        "tileattn: argument 'q': the CUDA backend supports sequence lengths and "
        "batch x heads x query blocks below 2^31");
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  DeviceGuard guard(p.device_index);
  const cudaError_t status = bucket == 64    ? launch_forward<64>(p, cuda_stream)
                             : bucket == 128 ? launch_forward<128>(p, cuda_stream)
                                             : launch_forward<256>(p, cuda_stream);
  if (status != cudaSuccess) throw_cuda("f32 kernel launch", status);
}

}  // namespace tileattn::detail
