// Host side of the CUDA backward: AttnBackwardParams -> FlashBwdParams, the per-call workspace
// (stream-ordered), choice of the kernel (sm90 where it applies, else sm80) and instantiation
// (element type, head-dim bucket, fast or general score path), launch, error reporting. Device
// code: src/cuda/sm80/flash_bwd_kernel.cuh and src/cuda/sm90/flash_bwd_sm90.cuh.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include "cuda/common/flash_bwd_params.hpp"
#include "cuda/cuda_forward.hpp"
#include "cuda/cuda_host.hpp"
#include "cuda/f32/f32_host.hpp"
#include "cuda/sm80/flash_bwd_launch.hpp"
#include "cuda/sm80/tile_config.hpp"
#include "cuda/sm90/flash_bwd_sm90_launch.hpp"
#include "cuda/sm90/tile_config.hpp"

namespace tileattn::detail {
namespace {

// len_q_padded: a multiple of every block_m, so a query block's lse and delta rows never run
// past its (b, h) row of the workspace.
constexpr std::int64_t kWorkspaceRowAlign = 128;

// A 16-bit tensor whose rows of `cols` elements can be read or written as 16-byte chunks of 8
// elements (aligned base and strides).
bool rows_in_16_byte_chunks(DType dtype, std::int64_t cols, const void* data, std::int64_t stride_b,
                            std::int64_t stride_l, std::int64_t stride_h) {
  return dtype != DType::f32 && cols % 8 == 0 && aligned16(data) && stride_b % 8 == 0 &&
         stride_l % 8 == 0 && stride_h % 8 == 0;
}

bool dq_vector_stores_ok(const AttnBackwardParams& p) {
  return rows_in_16_byte_chunks(p.dq_dtype, p.dim, p.dq, p.dq_stride_b, p.dq_stride_l,
                                p.dq_stride_h);
}

bool dkv_vector_stores_ok(const AttnBackwardParams& p) {
  return rows_in_16_byte_chunks(p.dk_dtype, p.dim, p.dk, p.dk_stride_b, p.dk_stride_l,
                                p.dk_stride_h) &&
         rows_in_16_byte_chunks(p.dv_dtype, p.dim_v, p.dv, p.dv_stride_b, p.dv_stride_l,
                                p.dv_stride_h);
}

bool dout_vector_loads_ok(const AttnBackwardParams& p) {
  return p.dout_dtype == p.dtype &&
         rows_in_16_byte_chunks(p.dout_dtype, p.dim_v, p.dout, p.do_stride_b, p.do_stride_l,
                                p.do_stride_h);
}

template <typename T, int kBucket>
cudaError_t launch_bucket(const cuda::FlashBwdParams& k, bool general, cudaStream_t stream) {
  return general ? cuda::launch_flash_bwd<T, kBucket, true>(k, stream)
                 : cuda::launch_flash_bwd<T, kBucket, false>(k, stream);
}

// f32 storage runs the bf16 kernel (tiles converted on load, f32 accumulation), as the forward.
template <typename T>
cudaError_t launch_type(int bucket, const cuda::FlashBwdParams& k, bool general,
                        cudaStream_t stream) {
  switch (bucket) {
    case 64: return launch_bucket<T, 64>(k, general, stream);
    case 128: return launch_bucket<T, 128>(k, general, stream);
    default: return launch_bucket<T, 256>(k, general, stream);
  }
}

// The sm90 backward covers the fast score path with 16-bit storage (dout of the same type),
// 16-byte aligned rows and D <= 128 (deterministic mode too), on an sm_90a build and device.
bool sm90_backward_applies(const AttnBackwardParams& p, bool general, int bucket) {
  return !general && bucket <= 128 && vector_loads_ok(p) && dout_vector_loads_ok(p) &&
         use_sm90(p.device_index);
}

cudaError_t launch_sm90(int bucket, DType dtype, const cuda::FlashBwdParams& k,
                        cudaStream_t stream) {
  if (dtype == DType::f16)
    return bucket == 64 ? cuda::launch_flash_bwd_sm90<__half, 64>(k, stream)
                        : cuda::launch_flash_bwd_sm90<__half, 128>(k, stream);
  return bucket == 64 ? cuda::launch_flash_bwd_sm90<__nv_bfloat16, 64>(k, stream)
                      : cuda::launch_flash_bwd_sm90<__nv_bfloat16, 128>(k, stream);
}

// The backward's sizes: head-dim bucket, tiles, and the workspace's parts: dQ accumulator,
// delta, lse * log2(e), and the deterministic mode's turn counters (one per query block and
// column chunk of the sm80 kernel; the sm90 kernel's query blocks are no smaller and it has one
// chunk).
struct BackwardPlan {
  int bucket = 0;
  cuda::BwdTileConfig cfg{};
  std::int64_t len_q_padded = 0, m_blocks = 0, workspace_rows = 0;
  std::size_t accum_floats = 0, turns = 0, bytes = 0;
};

BackwardPlan plan_backward(const AttnBackwardParams& p) {
  BackwardPlan b;
  b.bucket = cuda::bwd_bucket(static_cast<int>(std::max(p.dim, p.dim_v)));
  b.cfg = cuda::bwd_tile_config(b.bucket);
  const cuda::BwdTileConfig& cfg = b.cfg;
  b.len_q_padded = (p.len_q + kWorkspaceRowAlign - 1) / kWorkspaceRowAlign * kWorkspaceRowAlign;
  const std::int64_t n_blocks = (p.len_k + cfg.block_n() - 1) / cfg.block_n();
  b.m_blocks = (p.len_q + cfg.block_m - 1) / cfg.block_m;
  b.workspace_rows = p.batch * p.heads_q * b.len_q_padded;
  if (p.len_q > INT_MAX - 256 || p.len_k > INT_MAX - 256 || p.total_q > INT_MAX - 256 ||
      p.total_k > INT_MAX - 256 || n_blocks * cfg.chunks() * p.heads_kv * p.batch > INT_MAX ||
      b.workspace_rows / kWorkspaceRowAlign > INT_MAX)
    throw Error(
        "tileattn: argument 'q': the CUDA backend supports sequence lengths and "
        "batch x heads x blocks below 2^31");
  static_assert(cuda::sm90_bwd_tile_config(64).block_m >= cuda::bwd_tile_config(64).block_m &&
                cuda::sm90_bwd_tile_config(128).block_m >= cuda::bwd_tile_config(128).block_m);
  b.accum_floats = static_cast<std::size_t>(b.workspace_rows) * b.bucket;
  b.turns = p.deterministic
                ? static_cast<std::size_t>(p.batch * p.heads_q * b.m_blocks * cfg.chunks())
                : 0;
  b.bytes =
      (b.accum_floats + 2 * static_cast<std::size_t>(b.workspace_rows)) * 4 + b.turns * sizeof(int);
  return b;
}

bool runs_f32_kernels(const AttnBackwardParams& p, bool f32_via_bf16) {
  return p.dtype == DType::f32 && !f32_via_bf16;
}

}  // namespace

std::size_t cuda_backward_workspace_bytes(const AttnBackwardParams& p, bool f32_via_bf16) {
  return runs_f32_kernels(p, f32_via_bf16) ? cuda_f32_backward_workspace_bytes(p)
                                           : plan_backward(p).bytes;
}

void cuda_flash_backward(const AttnBackwardParams& p, void* stream, bool f32_via_bf16,
                         void* given_workspace, std::size_t given_bytes) {
  if (runs_f32_kernels(p, f32_via_bf16)) {
    check_given_workspace(given_workspace, given_bytes, cuda_f32_backward_workspace_bytes(p));
    return cuda_f32_backward(p, stream, given_workspace);
  }
  const BackwardPlan plan = plan_backward(p);
  const int bucket = plan.bucket;
  const cuda::BwdTileConfig cfg = plan.cfg;
  const std::int64_t len_q_padded = plan.len_q_padded;
  const std::int64_t workspace_rows = plan.workspace_rows;
  check_given_workspace(given_workspace, given_bytes, plan.bytes);

  cuda::FlashBwdParams k{};
  // The block sizes of the kernel that runs: query blocks (num_m_blocks) and key blocks.
  auto set_blocks = [&](int block_m, int block_n) {
    static_cast<cuda::FlashFwdParams&>(k) = make_fwd_params(p, block_m);
    k.num_n_blocks = static_cast<int>((p.len_k + block_n - 1) / block_n);
  };
  set_blocks(cfg.block_m, cfg.block_n());
  set_gradient_views(k, p);
  k.dout_vector_loads = dout_vector_loads_ok(p);
  k.dq_vector_stores = dq_vector_stores_ok(p);
  k.dkv_vector_stores = dkv_vector_stores_ok(p);
  k.len_q_padded = static_cast<int>(len_q_padded);

  const std::size_t accum_floats = plan.accum_floats;
  const std::size_t turns = plan.turns;
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  DeviceGuard guard(p.device_index);
  // The library's pool only when the caller gave no workspace (then nothing is allocated).
  const StreamWorkspace pooled(given_workspace != nullptr ? 0 : plan.bytes, p.device_index,
                               cuda_stream);
  auto* floats = static_cast<float*>(given_workspace != nullptr ? given_workspace : pooled.data());
  k.dq_accum = floats;  // zeroed by the prepare kernel
  k.dq_accum_cols = bucket;
  k.delta = floats + accum_floats;
  k.lse_log2 = k.delta + workspace_rows;
  k.dq_turn = p.deterministic ? reinterpret_cast<int*>(k.lse_log2 + workspace_rows) : nullptr;

  cudaError_t status = cudaSuccess;
  if (turns > 0) status = cudaMemsetAsync(k.dq_turn, 0, turns * sizeof(int), cuda_stream);
  if (status != cudaSuccess) throw_cuda("workspace initialisation", status);

  const bool general =
      p.mask != nullptr || p.softcap > 0.0f || p.alibi_slopes != nullptr || p.has_dropout();
  status = cudaErrorNotSupported;
  if (sm90_backward_applies(p, general, bucket)) {
    const cuda::Sm90BwdTileConfig cfg90 = cuda::sm90_bwd_tile_config(bucket);
    set_blocks(cfg90.block_m, cfg90.block_n);
    status = launch_sm90(bucket, p.dtype, k, cuda_stream);
    if (status == cudaErrorNotSupported) set_blocks(cfg.block_m, cfg.block_n());
  }
  if (status == cudaErrorNotSupported)
    status = p.dtype == DType::f16 ? launch_type<__half>(bucket, k, general, cuda_stream)
                                   : launch_type<__nv_bfloat16>(bucket, k, general, cuda_stream);
  if (status != cudaSuccess) throw_cuda("backward kernel launch", status);
}

}  // namespace tileattn::detail
