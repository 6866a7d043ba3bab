// Host encoding of the sm90 kernel's TMA descriptors (see tensor_maps.hpp).
#include "cuda/sm90/tensor_maps.hpp"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

namespace tileattn::cuda {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encoder = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      fn = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encoder;
}

}  // namespace

bool encode_tile_map(CUtensorMap* map, const void* base, bool bf16, std::int64_t dim,
                     std::int64_t len, std::int64_t heads, std::int64_t batch,
                     std::int64_t stride_l, std::int64_t stride_h, std::int64_t stride_b,
                     int box_rows) {
  const auto encode = tensor_map_encoder();
  if (encode == nullptr || reinterpret_cast<std::uintptr_t>(base) % 16 != 0) return false;
  const cuuint64_t sizes[4] = {static_cast<cuuint64_t>(dim), static_cast<cuuint64_t>(len),
                               static_cast<cuuint64_t>(heads), static_cast<cuuint64_t>(batch)};
  std::int64_t strides_bytes[3] = {stride_l * 2, stride_h * 2, stride_b * 2};
  cuuint64_t strides[3];
  for (int i = 0; i < 3; ++i) {
    // The stride of a dimension of size 1 is never applied; any valid value describes it.
    if (sizes[i + 1] == 1) strides_bytes[i] = 16;
    if (strides_bytes[i] <= 0 || strides_bytes[i] % 16 != 0 || strides_bytes[i] >= (1ll << 40))
      return false;
    strides[i] = static_cast<cuuint64_t>(strides_bytes[i]);
  }
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(box_rows), 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUresult status =
      encode(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
             const_cast<void*>(base), sizes, strides, box, element_strides,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return status == CUDA_SUCCESS;
}

}  // namespace tileattn::cuda
