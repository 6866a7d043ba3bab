// The interface between the KV-cache attention driver (decode.cpp: threads, splits, rotary,
// merging) and its per-instruction-set compute kernel (decode_kernel.inl). The kernel reads the
// cache where it lies, one key block after another, for all query rows of a bundle of kv heads
// at once, so each K and V row is read from memory once per call and the heads' neighbouring
// slices of a cache row are read together.
//
// As with kernels.hpp, only plain structs and raw pointers cross into the ISA translation units.
#pragma once

#include <cstdint>

namespace tileattn::detail {

// Keys processed per step: scores for this many keys are kept per row.
inline constexpr int kDecodeBlock = 64;

enum class DecodeStorage : std::uint8_t { f32, f16, bf16 };

// One kv head's part of a work item: `rows` query rows (f32, already rotated) of that kv head
// against keys [key_begin, key_end) of one sequence.
struct DecodeJob {
  DecodeStorage storage;
  std::int64_t rows;
  std::int64_t dim, dim_v;
  std::int64_t dim_padded, dim_v_padded;  // multiples of the kernel's lanes (decode_lanes)

  // [rows rounded up to a multiple of 16][dim_padded], zero beyond dim and beyond rows.
  const float* q;
  // The same in bf16 bits for a bf16 cache (exact: q holds the cache dtype's values), read by
  // the avx512_bf16 kernel's dot products; nullptr otherwise.
  const std::uint16_t* q_bf16;

  // Key j lives in page j / page_size, row j % page_size: K row at
  // k_pages[j / page_size] + k_offset + (j % page_size) * k_row_stride elements, V likewise. A
  // contiguous cache is one page. (The jobs of one call share their page pointers; k_offset
  // and v_offset pick each one's kv head.)
  const void* const* k_pages;
  const void* const* v_pages;
  std::int64_t k_offset, v_offset;
  std::int64_t page_size;
  std::int64_t k_row_stride, v_row_stride;
  std::int64_t key_begin, key_end;

  // Keys visible to row r: [key_lo[r], key_hi[r]) (causal/window band and the key count).
  const std::int64_t* key_lo;
  const std::int64_t* key_hi;
  // ALiBi: row r subtracts alibi_slope[r] * |alibi_pos[r] - j| (nullptr: off).
  const float* alibi_slope;
  const std::int64_t* alibi_pos;

  float scale;       // multiplier of q.k
  float scale_log2;  // scale * log2(e)
  float softcap;     // 0 = off

  // Result of the item: normalised rows [rows][dim_v_padded] and their natural-log lse
  // (-inf: no visible key; NaN: the row is poisoned, out NaN too).
  float* out;
  float* lse;

  // Scratch of the calling thread: scores [rows rounded up to 16][kDecodeBlock] and, for head
  // dims that are not whole vectors, staging rows [kDecodeBlock][dim_padded] and
  // [kDecodeBlock][dim_v_padded] (may be shared by the jobs of one call); row_max and row_sum
  // [rows], poison [rows] (one per job).
  float* scores;
  float* row_max;
  float* row_sum;
  std::uint8_t* poison;
  float* k_stage;
  float* v_stage;
};

// Runs `count` jobs of one sequence, query rows and key range (the kv heads of a bundle), key
// block by key block across all of them.
using DecodeKernel = void (*)(const DecodeJob* jobs, int count);

DecodeKernel cpu_decode_kernel_portable();
DecodeKernel cpu_decode_kernel_avx2();
DecodeKernel cpu_decode_kernel_avx512();
DecodeKernel cpu_decode_kernel_avx512_bf16();

// Floats per vector of the decode kernel at each level: 16 for the avx512 kernel, else 8.
inline int decode_lanes(bool avx512) {
  return avx512 ? 16 : 8;
}

}  // namespace tileattn::detail
