// TMA descriptors for the sm90 kernel, encoded on the host (no driver library at link time: the
// encoder is looked up once through the runtime's driver entry-point query).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace tileattn::cuda {

// A 4-D view (dim, len, heads, batch) of a 16-bit tensor with element strides (1, stride_l,
// stride_h, stride_b), read in boxes of 64 columns x box_rows rows with the 128-byte swizzle;
// out-of-bounds elements read as zero. Returns false when the tensor cannot be described
// (strides or base not 16-byte aligned, no driver support): the caller falls back to sm80.
bool encode_tile_map(CUtensorMap* map, const void* base, bool bf16, std::int64_t dim,
                     std::int64_t len, std::int64_t heads, std::int64_t batch,
                     std::int64_t stride_l, std::int64_t stride_h, std::int64_t stride_b,
                     int box_rows);

}  // namespace tileattn::cuda
