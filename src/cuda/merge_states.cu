// merge_attention_states on the device: one warp per (b, l, h) row, lanes over the head dim; the
// weights come from common/merge_row.hpp, as on the host.
#include <cuda_runtime.h>

#include <cstdint>

#include "common/merge_row.hpp"
#include "cuda/common/elements.cuh"
#include "cuda/cuda_forward.hpp"
#include "cuda/cuda_host.hpp"

namespace tileattn::detail {
namespace {

constexpr int kWarpsPerBlock = 4;

__device__ cuda::ElemType device_type(DType d) {
  return d == DType::f32   ? cuda::ElemType::f32
         : d == DType::f16 ? cuda::ElemType::f16
                           : cuda::ElemType::bf16;
}

__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    merge_states_kernel(const __grid_constant__ MergeParams p) {
  const std::int64_t row =
      static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (row >= p.batch * p.len * p.heads) return;
  const std::int64_t h = row % p.heads, l = row / p.heads % p.len, b = row / p.heads / p.len;
  float lse[kMaxMergeParts], weight[kMaxMergeParts];
  for (int i = 0; i < p.num_parts; ++i) {
    const MergeOperand& part = p.parts[i];
    lse[i] = part.lse[b * part.lse_stride_b + h * part.lse_stride_h + l * part.lse_stride_l];
  }
  float merged_lse = 0.0f;
  const MergedRow kind = merge_weights(lse, p.num_parts, weight, &merged_lse);
  const MergeOperand& res = p.result;
  const std::int64_t out_base = b * res.o_stride_b + l * res.o_stride_l + h * res.o_stride_h;
  const cuda::ElemType out_type = device_type(res.dtype);
  for (std::int64_t d = lane; d < p.dim; d += 32) {
    float acc = kind == MergedRow::poisoned ? NAN : 0.0f;
    if (kind == MergedRow::weighted) {
      for (int i = 0; i < p.num_parts; ++i) {
        if (lse[i] == -INFINITY) continue;  // never read: it may hold anything
        const MergeOperand& part = p.parts[i];
        const std::int64_t base = b * part.o_stride_b + l * part.o_stride_l + h * part.o_stride_h;
        acc += weight[i] * cuda::load_elem(static_cast<const char*>(part.out), base + d,
                                           device_type(part.dtype));
      }
    }
    cuda::store_elem(res.out, out_base + d, out_type, acc);
  }
  if (lane == 0 && res.lse != nullptr)
    res.lse[b * res.lse_stride_b + h * res.lse_stride_h + l * res.lse_stride_l] = merged_lse;
}

}  // namespace

void cuda_merge_states(const MergeParams& p, void* stream) {
  const std::int64_t rows = p.batch * p.len * p.heads;
  if (rows == 0 || p.dim == 0) return;
  const DeviceGuard guard(p.device_index);
  const std::int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > 0x7fffffff)
    throw_cuda("merge_attention_states: too many rows", cudaErrorInvalidValue);
  merge_states_kernel<<<static_cast<unsigned>(blocks), kWarpsPerBlock * 32, 0,
                        static_cast<cudaStream_t>(stream)>>>(p);
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) throw_cuda("merge_attention_states", status);
}

}  // namespace tileattn::detail
