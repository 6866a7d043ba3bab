// Host side of the f32 backward: AttnBackwardParams -> F32BwdParams, the per-call workspace
// (stream-ordered: lse, delta and a flag per row), and the four launches on the caller's stream:
// prepare, dQ, dK / dV, poison. Device code: f32_bwd_rows.cuh, f32_bwd_dq_kernel.cuh,
// f32_bwd_dkdv_kernel.cuh.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "cuda/cuda_host.hpp"
#include "cuda/f32/f32_bwd_dkdv_kernel.cuh"
#include "cuda/f32/f32_bwd_dq_kernel.cuh"
#include "cuda/f32/f32_bwd_rows.cuh"
#include "cuda/f32/f32_config.hpp"
#include "cuda/f32/f32_host.hpp"
#include "cuda/f32/f32_launch.cuh"
#include "cuda/f32/f32_params.hpp"

namespace tileattn::detail {
namespace {

using cuda::f32::F32BwdParams;

template <int kBucket>
cudaError_t launch_gradients(F32BwdParams& k, const AttnBackwardParams& p, cudaStream_t stream) {
  using namespace cuda::f32;
  constexpr F32Tiles dq = bwd_dq_tiles(kBucket), dkdv = bwd_dkdv_tiles(kBucket);
  k.num_m_blocks = static_cast<int>((p.len_q + dq.block_m - 1) / dq.block_m);
  k.num_n_blocks = static_cast<int>((p.len_k + dkdv.block_n - 1) / dkdv.block_n);
  cudaError_t status =
      launch_f32(&f32_bwd_dq_kernel<kBucket>, bwd_dq_smem_bytes(kBucket),
                 static_cast<unsigned>(k.num_m_blocks) * static_cast<unsigned>(p.heads_q * p.batch),
                 k, stream);
  if (status != cudaSuccess) return status;
  return launch_f32(
      &f32_bwd_dkdv_kernel<kBucket>, bwd_dkdv_smem_bytes(kBucket),
      static_cast<unsigned>(k.num_n_blocks) * static_cast<unsigned>(p.heads_kv * p.batch), k,
      stream);
}

// One warp per (b, h, i) row.
cudaError_t launch_rows(void (*kernel)(const F32BwdParams), const F32BwdParams& k,
                        std::int64_t rows, cudaStream_t stream) {
  constexpr int kWarps = cuda::f32::kRowWarps;
  return cuda::f32::launch_f32(kernel, 0, static_cast<unsigned>((rows + kWarps - 1) / kWarps), k,
                               stream, kWarps * 32);
}

}  // namespace

std::size_t cuda_f32_backward_workspace_bytes(const AttnBackwardParams& p) {
  return static_cast<std::size_t>(p.batch * p.heads_q * p.len_q) * 12;
}

void cuda_f32_backward(const AttnBackwardParams& p, void* stream, void* given_workspace) {
  const int bucket = cuda::f32::head_dim_bucket(static_cast<int>(std::max(p.dim, p.dim_v)));
  const std::int64_t rows = p.batch * p.heads_q * p.len_q;
  if (p.len_q > INT_MAX - 256 || p.len_k > INT_MAX - 256 ||
      (p.len_q + 15) / 16 * p.heads_q * p.batch > INT_MAX ||
      (p.len_k + 31) / 32 * p.heads_kv * p.batch > INT_MAX || rows / 8 > INT_MAX)
    throw Error(
        "tileattn: argument 'q': the CUDA backend supports sequence lengths and "
        "batch x heads x blocks below 2^31");

  F32BwdParams k{};
  static_cast<cuda::FlashFwdParams&>(k) = make_fwd_params(p, 64);
  set_gradient_views(k, p);

  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  DeviceGuard guard(p.device_index);
  // The library's pool only when the caller gave no workspace (then nothing is allocated).
  const StreamWorkspace pooled(
      given_workspace != nullptr ? 0 : cuda_f32_backward_workspace_bytes(p), p.device_index,
      cuda_stream);
  k.lse_rows = static_cast<float*>(given_workspace != nullptr ? given_workspace : pooled.data());
  k.delta_rows = k.lse_rows + rows;
  k.row_flags = reinterpret_cast<int*>(k.delta_rows + rows);

  cudaError_t status = launch_rows(&cuda::f32::f32_bwd_prepare_kernel, k, rows, cuda_stream);
  if (status == cudaSuccess)
    status = bucket == 64    ? launch_gradients<64>(k, p, cuda_stream)
             : bucket == 128 ? launch_gradients<128>(k, p, cuda_stream)
                             : launch_gradients<256>(k, p, cuda_stream);
  if (status == cudaSuccess)
    status = launch_rows(&cuda::f32::f32_bwd_poison_kernel, k, rows, cuda_stream);
  if (status != cudaSuccess) throw_cuda("f32 backward kernel launch", status);
}

}  // namespace tileattn::detail
