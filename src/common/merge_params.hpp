// MergeParams: the validated description of one merge_attention_states call (built only by
// validate_merge, src/api/validate_merge.cpp). Rows are (b, l, h); a varlen result is B = 1.
#pragma once

#include <cstdint>

#include "tileattn/tileattn.hpp"

namespace tileattn::detail {

struct MergeOperand {
  void* out = nullptr;   // [B, L, H, Dv] in dtype
  float* lse = nullptr;  // [B, H, L], or nullptr (only for the result)
  DType dtype = DType::f32;
  std::int64_t o_stride_b = 0, o_stride_l = 0, o_stride_h = 0;
  std::int64_t lse_stride_b = 0, lse_stride_h = 0, lse_stride_l = 0;
};

struct MergeParams {
  MergeOperand parts[kMaxMergeParts];
  int num_parts = 0;
  MergeOperand result;
  std::int64_t batch = 0, len = 0, heads = 0, dim = 0;
  Device device = Device::cpu;
  int device_index = 0;
};

}  // namespace tileattn::detail
