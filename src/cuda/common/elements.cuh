// Element loads and stores of the storage types the kernels read and write, through f32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

#include "cuda/common/flash_fwd_params.hpp"

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

// x and y rounded to a 16-bit type (f16, else bf16), x in the low half: the bits of a pair.
__device__ __forceinline__ std::uint32_t pack_pair16(ElemType type, float x, float y) {
  std::uint32_t bits;
  if (type == ElemType::f16) {
    const __half2 pair = __floats2half2_rn(x, y);
    memcpy(&bits, &pair, 4);
  } else {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(x, y);
    memcpy(&bits, &pair, 4);
  }
  return bits;
}

// Two consecutive elements (index even, base aligned to two elements): one 4- or 8-byte store.
__device__ __forceinline__ void store_pair(void* base, std::int64_t index, ElemType type, float x,
                                           float y) {
  if (type == ElemType::f32)
    reinterpret_cast<float2*>(static_cast<float*>(base) + index)[0] = make_float2(x, y);
  else
    reinterpret_cast<std::uint32_t*>(static_cast<__half*>(base) + index)[0] =
        pack_pair16(type, x, y);
}

}  // namespace tileattn::cuda
