// Element loads and stores of the storage types the kernels read and write, through f32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/sm80/flash_fwd_params.hpp"

namespace tileattn::cuda {

__device__ __forceinline__ float load_elem(const char* base, std::int64_t index, ElemType type) {
  switch (type) {
    case ElemType::f32: return reinterpret_cast<const float*>(base)[index];
    case ElemType::f16: return __half2float(reinterpret_cast<const __half*>(base)[index]);
    default: return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(base)[index]);
  }
}

__device__ __forceinline__ void store_elem(void* base, std::int64_t index, ElemType type, float x) {
  switch (type) {
    case ElemType::f32: static_cast<float*>(base)[index] = x; break;
    case ElemType::f16: static_cast<__half*>(base)[index] = __float2half_rn(x); break;
    default: static_cast<__nv_bfloat16*>(base)[index] = __float2bfloat16_rn(x); break;
  }
}

// Two consecutive elements (index even, base aligned to two elements): one 4- or 8-byte store.
__device__ __forceinline__ void store_pair(void* base, std::int64_t index, ElemType type, float x,
                                           float y) {
  switch (type) {
    case ElemType::f32:
      reinterpret_cast<float2*>(static_cast<float*>(base) + index)[0] = make_float2(x, y);
      break;
    case ElemType::f16:
      reinterpret_cast<__half2*>(static_cast<__half*>(base) + index)[0] = __floats2half2_rn(x, y);
      break;
    default:
      reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(base) + index)[0] =
          __floats2bfloat162_rn(x, y);
      break;
  }
}

}  // namespace tileattn::cuda
