#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/sm80/decode_kernel.cuh"
#include "cuda/sm80/decode_launch.hpp"

namespace tileattn::cuda {

int decode_bucket(int dim, int dim_v) {
  const int d = dim > dim_v ? dim : dim_v;
  return d <= 64 ? 64 : d <= 128 ? 128 : 256;
}

int decode_block_n(int bucket) {
  return decode_config(bucket).block_n;
}

namespace {

template <typename T, int kBucket>
cudaError_t launch(const DecodeParams& p, cudaStream_t stream) {
  constexpr DecodeConfig cfg = decode_config(kBucket);
  auto* kernel = &decode_kernel<T, kBucket>;
  const cudaError_t status =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, cfg.smem_bytes());
  if (status != cudaSuccess) return status;
  const dim3 grid(static_cast<unsigned>(p.splits),
                  static_cast<unsigned>(p.row_tiles) * static_cast<unsigned>(p.heads_kv),
                  static_cast<unsigned>(p.batch));
  kernel<<<grid, cfg.threads(), cfg.smem_bytes(), stream>>>(p);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_bucket(const DecodeParams& p, int bucket, cudaStream_t stream) {
  switch (bucket) {
    case 64: return launch<T, 64>(p, stream);
    case 128: return launch<T, 128>(p, stream);
    default: return launch<T, 256>(p, stream);
  }
}

}  // namespace

cudaError_t launch_decode(const DecodeParams& p, int bucket, cudaStream_t stream) {
  return p.in_type == ElemType::f16 ? launch_bucket<__half>(p, bucket, stream)
                                    : launch_bucket<__nv_bfloat16>(p, bucket, stream);
}

}  // namespace tileattn::cuda
