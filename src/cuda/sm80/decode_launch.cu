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

// The kernel's shared-memory opt-in, once per process (a per-call cudaFuncSetAttribute costs
// host time that decode, a few microseconds of GPU work, cannot hide).
template <typename T, int kBucket>
cudaError_t prepare() {
  static const cudaError_t status = [] {
    const cudaError_t s = cudaFuncSetAttribute(&decode_kernel<T, kBucket>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               decode_config(kBucket).smem_bytes());
    // The most shared memory (the combine asks for the same; a hint, failure changes nothing).
    if (cudaFuncSetAttribute(&decode_kernel<T, kBucket>,
                             cudaFuncAttributePreferredSharedMemoryCarveout,
                             cudaSharedmemCarveoutMaxShared) != cudaSuccess)
      static_cast<void>(cudaGetLastError());
    return s;
  }();
  return status;
}

template <typename T, int kBucket>
int ctas_per_sm() {
  if (prepare<T, kBucket>() != cudaSuccess) return 1;
  static const int ctas = [] {
    int n = 0;
    constexpr DecodeConfig cfg = decode_config(kBucket);
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, &decode_kernel<T, kBucket>, cfg.threads(),
                                                      cfg.smem_bytes()) != cudaSuccess)
      n = 1;
    return n > 0 ? n : 1;
  }();
  return ctas;
}

template <typename T>
int ctas_per_sm_bucket(int bucket) {
  switch (bucket) {
    case 64: return ctas_per_sm<T, 64>();
    case 128: return ctas_per_sm<T, 128>();
    default: return ctas_per_sm<T, 256>();
  }
}

template <typename T, int kBucket>
cudaError_t launch(const DecodeParams& p, cudaStream_t stream) {
  constexpr DecodeConfig cfg = decode_config(kBucket);
  auto* kernel = &decode_kernel<T, kBucket>;
  const cudaError_t status = prepare<T, kBucket>();
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

int decode_ctas_per_sm(ElemType in_type, int bucket) {
  return in_type == ElemType::f16 ? ctas_per_sm_bucket<__half>(bucket)
                                  : ctas_per_sm_bucket<__nv_bfloat16>(bucket);
}

cudaError_t launch_decode(const DecodeParams& p, int bucket, cudaStream_t stream) {
  return p.in_type == ElemType::f16 ? launch_bucket<__half>(p, bucket, stream)
                                    : launch_bucket<__nv_bfloat16>(p, bucket, stream);
}

}  // namespace tileattn::cuda
