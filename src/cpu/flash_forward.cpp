// The ISA-neutral driver of the CPU flash forward: threads, buffers, packing, dtype conversion
// and work order. The compute kernels (flash_kernel.inl, amx_kernel.cpp) only see TileJob.
//
// Work is processed in phases of (batch, kv head) pairs whose packed K/V fit a small budget:
// all threads pack a phase's K/V once, then share its query tiles (every query head of each
// pair's group), pair by pair and longest first within a pair, so that causal work balances
// between threads while the tiles running together share one pair's K/V in the caches.
#include "cpu/flash_forward.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/threads.hpp"
#include "cpu/aligned_buffer.hpp"
#include "cpu/kernels.hpp"
#include "cpu/row_convert.hpp"
#include "cpu/tile_config.hpp"
#include "cpu/tile_transpose.hpp"

namespace tileattn::detail {
namespace {

struct Plan {
  KernelFamily family;
  TileKernel kernel;
  CpuTileConfig config;
  PackedGeometry geometry;
  std::int64_t blocks;        // key blocks per head
  std::int64_t k_head_elems;  // packed K of one (batch, kv head)
  std::int64_t v_head_elems;
  bool f16c;             // hardware f16 conversion (every level from avx2 up)
  std::int64_t q_group;  // f32 family: rows per group of the packed Q tile (tile_config.hpp)
};

Plan make_plan(const AttnParams& p, CpuIsa isa) {
  Plan plan{};
  const bool bf16 = p.dtype == DType::bf16;
  plan.family = KernelFamily::f32;
  switch (isa) {
    case CpuIsa::amx_bf16:
      if (bf16 && !p.has_dropout()) plan.family = KernelFamily::amx;
      plan.kernel = plan.family == KernelFamily::amx ? cpu_tile_kernel_amx_bf16()
                                                     : cpu_tile_kernel_avx512_bf16();
      break;
    case CpuIsa::avx512_bf16:
      if (bf16 && !p.has_dropout()) plan.family = KernelFamily::bf16_dot;
      plan.kernel = plan.family == KernelFamily::bf16_dot ? cpu_tile_kernel_avx512_bf16_dot()
                                                          : cpu_tile_kernel_avx512_bf16();
      break;
    case CpuIsa::avx512: plan.kernel = cpu_tile_kernel_avx512(); break;
    case CpuIsa::avx2: plan.kernel = cpu_tile_kernel_avx2(); break;
    default: plan.kernel = cpu_tile_kernel_portable(); break;
  }
  plan.f16c = isa != CpuIsa::portable;
  plan.q_group = f32_q_group_rows(f32_kernel_lanes(isa));
  plan.config = cpu_tile_config(plan.family);
  plan.geometry = packed_geometry(plan.family, p.dim, p.dim_v);
  plan.blocks = (p.len_k + plan.config.block_k - 1) / plan.config.block_k;
  plan.k_head_elems = plan.blocks * plan.geometry.k_block_elems;
  plan.v_head_elems = plan.blocks * plan.geometry.v_block_elems;
  return plan;
}

// Asks for every cache line of `rows` rows of `row_bytes` bytes, `stride` elements apart, before
// they are read: the rows of a tile or key block lie a whole token's heads apart in memory (8 KiB
// at 16 heads of D 128 in f32), far from the caches and beyond the hardware's stream prefetch,
// and their transposes otherwise wait for one miss after another.
// `stride` is in elements of `element_bytes`: a single row's stride is never used (validation
// does not bound it, and stride * element_bytes may overflow), nor is a step past the last row.
void prefetch_rows(const void* first, std::int64_t rows, std::int64_t stride,
                   std::int64_t element_bytes, std::int64_t row_bytes) {
  const char* row = static_cast<const char*>(first);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(row + b);
    if (r + 1 < rows) row += stride * element_bytes;
  }
}

const void* k_row(const AttnParams& p, std::int64_t b, std::int64_t key, std::int64_t kv_head) {
  return static_cast<const char*>(p.k) +
         (b * p.k_stride_b + key * p.k_stride_l + kv_head * p.k_stride_h) * size_of(p.dtype);
}
const void* v_row(const AttnParams& p, std::int64_t b, std::int64_t key, std::int64_t kv_head) {
  return static_cast<const char*>(p.v) +
         (b * p.v_stride_b + key * p.v_stride_l + kv_head * p.v_stride_h) * size_of(p.dtype);
}

// Keys of block kb that the packed copy holds: those below the batch entry's valid key length
// (every row masks the others, so their memory is never read).
std::int64_t packed_keys(const AttnParams& p, std::int64_t b, std::int64_t kb,
                         std::int64_t block_k) {
  return std::clamp<std::int64_t>(p.key_length(b) - kb * block_k, 0, block_k);
}

// Flags in poison[2] the block's keys whose K or V row is not finite (the packers zero them).
void find_poisoned_keys(const AttnParams& p, std::int64_t b, std::int64_t kv_head,
                        std::int64_t key0, std::int64_t keys, std::uint64_t* poison) {
  poison[0] = poison[1] = 0;
  for (std::int64_t c = 0; c < keys; ++c)
    if (!row_is_finite(k_row(p, b, key0 + c, kv_head), p.dtype, 0, p.dim) ||
        !row_is_finite(v_row(p, b, key0 + c, kv_head), p.dtype, 0, p.dim_v))
      poison[c / 64] |= std::uint64_t{1} << (c % 64);
}
bool is_poisoned(const std::uint64_t* poison, std::int64_t c) {
  return (poison[c / 64] >> (c % 64) & 1u) != 0;
}

// f32 family: flags in poison[2] the keys of a packed block whose K column or V row holds an Inf
// or NaN, and zeros them. The scan reads the packed block while it is in L1 (a separate pass
// over the source rows would read them from memory a second time), contiguous rows at a time.
void zero_poisoned_keys_f32(const Plan& plan, std::int64_t D, float* k_dst, float* v_dst,
                            std::uint64_t* poison) {
  const std::int64_t block_k = plan.config.block_k, k_panel = plan.config.k_panel,
                     v_panel = plan.config.v_panel, dvp = plan.geometry.dim_v_padded;
  constexpr std::uint32_t kExponent = 0x7f800000u;
  // Per key: the OR of (exponent bits == all ones) over its elements, in 32-bit lanes so that
  // the loops vectorise.
  std::uint32_t bad[128] = {};
  for (std::int64_t panel = 0; panel < block_k; panel += k_panel) {
    const float* src = k_dst + panel * D;
    std::uint32_t* flags = bad + panel;
    for (std::int64_t d = 0; d < D; ++d)
      for (std::int64_t c = 0; c < k_panel; ++c)
        flags[c] |= (std::bit_cast<std::uint32_t>(src[d * k_panel + c]) & kExponent) == kExponent;
  }
  for (std::int64_t c0 = 0; c0 < dvp; c0 += v_panel) {
    const std::int64_t panel_width = std::min(v_panel, dvp - c0);
    for (std::int64_t c = 0; c < block_k; ++c) {
      const float* row = v_dst + block_k * c0 + c * panel_width;
      std::uint32_t row_bad = 0;
      for (std::int64_t e = 0; e < panel_width; ++e)
        row_bad |= (std::bit_cast<std::uint32_t>(row[e]) & kExponent) == kExponent;
      bad[c] |= row_bad;
    }
  }
  poison[0] = poison[1] = 0;
  for (std::int64_t c = 0; c < block_k; ++c) {
    if (bad[c] == 0) continue;
    poison[c / 64] |= std::uint64_t{1} << (c % 64);
    float* k_column = k_dst + (c / k_panel) * k_panel * D + c % k_panel;
    for (std::int64_t d = 0; d < D; ++d) k_column[d * k_panel] = 0.0f;
    for (std::int64_t c0 = 0; c0 < dvp; c0 += v_panel) {
      const std::int64_t panel_width = std::min(v_panel, dvp - c0);
      std::fill_n(v_dst + block_k * c0 + c * panel_width, panel_width, 0.0f);
    }
  }
}

// f32 family: K transposed into panels of [D][k_panel], V into panels of [block_k][v_panel].
// `rows` is scratch for block_k row pointers, `buffer` for block_k converted rows. Poisoned
// keys are flagged in poison[2] and packed as zeros.
void pack_block_f32(const AttnParams& p, const Plan& plan, std::int64_t b, std::int64_t kv_head,
                    std::int64_t kb, float* k_dst, float* v_dst, const float** rows, float* buffer,
                    std::uint64_t* poison) {
  static_assert(cpu_tile_config(KernelFamily::f32).block_k <= 128, "two poison words a block");
  const std::int64_t block_k = plan.config.block_k, k_panel = plan.config.k_panel,
                     v_panel = plan.config.v_panel;
  const std::int64_t D = p.dim, Dv = p.dim_v, dvp = plan.geometry.dim_v_padded;
  const std::int64_t valid = packed_keys(p, b, kb, block_k);
  const std::int64_t width = std::max(D, Dv);
  const auto esize = static_cast<std::int64_t>(size_of(p.dtype));
  if (valid > 0) {
    prefetch_rows(k_row(p, b, kb * block_k, kv_head), valid, p.k_stride_l, esize, D * esize);
    prefetch_rows(v_row(p, b, kb * block_k, kv_head), valid, p.v_stride_l, esize, Dv * esize);
  }
  for (std::int64_t c = 0; c < valid; ++c)
    rows[c] = row_as_f32(k_row(p, b, kb * block_k + c, kv_head), p.dtype, 0, D, buffer + c * width,
                         plan.f16c);
  for (std::int64_t panel = 0; panel < block_k; panel += k_panel) {
    float* dst = k_dst + panel * D;
    const std::int64_t keys = std::clamp<std::int64_t>(valid - panel, 0, k_panel);
    transpose_rows(rows + panel, keys, D, dst, k_panel);
    if (keys < k_panel)
      for (std::int64_t d = 0; d < D; ++d)
        std::fill(dst + d * k_panel + keys, dst + (d + 1) * k_panel, 0.0f);
  }
  for (std::int64_t c = 0; c < valid; ++c)
    rows[c] = row_as_f32(v_row(p, b, kb * block_k + c, kv_head), p.dtype, 0, Dv, buffer + c * width,
                         plan.f16c);
  for (std::int64_t c0 = 0; c0 < dvp; c0 += v_panel) {
    const std::int64_t panel_width = std::min(v_panel, dvp - c0);
    const std::int64_t copied = std::clamp<std::int64_t>(Dv - c0, 0, panel_width);
    for (std::int64_t c = 0; c < block_k; ++c) {
      float* dst = v_dst + block_k * c0 + c * panel_width;
      if (c < valid) std::copy_n(rows[c] + c0, copied, dst);
      std::fill(dst + (c < valid ? copied : 0), dst + panel_width, 0.0f);
    }
  }
  zero_poisoned_keys_f32(plan, D, k_dst, v_dst, poison);
}

// amx and bf16_dot families (bf16 storage): K as [D/2][block_k][2], V as [block_k/2][Dv][2]
// (pairs along the reduction dimension, as AMX's B operand and vdpbf16ps want them). K is a
// transpose of 32-bit words (transpose_pairs), V interleaves the elements of two keys' rows
// (SSE2 unpacks): they run once per key block and kv head, and scalar they would be a visible
// share of a bf16 call.
void pack_block_pairs(const AttnParams& p, const Plan& plan, std::int64_t b, std::int64_t kv_head,
                      std::int64_t kb, std::uint16_t* k_dst, std::uint16_t* v_dst,
                      std::uint64_t* poison) {
  const std::int64_t block_k = plan.config.block_k;
  const std::int64_t dvp = plan.geometry.dim_v_padded;
  std::fill_n(k_dst, plan.geometry.k_block_elems, std::uint16_t{0});
  std::fill_n(v_dst, plan.geometry.v_block_elems, std::uint16_t{0});
  const std::int64_t valid = packed_keys(p, b, kb, block_k);
  constexpr std::int64_t kMaxKeys = 128;
  static_assert(cpu_tile_config(KernelFamily::amx).block_k <= kMaxKeys &&
                cpu_tile_config(KernelFamily::bf16_dot).block_k <= kMaxKeys);
  find_poisoned_keys(p, b, kv_head, kb * block_k, valid, poison);
  if (valid == 0) return;
  const std::uint16_t* k_rows[kMaxKeys] = {};
  for (std::int64_t c = 0; c < valid; ++c)
    k_rows[c] = is_poisoned(poison, c)
                    ? kZeroRow16
                    : static_cast<const std::uint16_t*>(k_row(p, b, kb * block_k + c, kv_head));
  transpose_pairs(k_rows, valid, p.dim / 2, k_dst, block_k);
  if (p.dim % 2 != 0)  // the last pair's second element stays the zero padding
    for (std::int64_t c = 0; c < valid; ++c)
      k_dst[((p.dim / 2) * block_k + c) * 2] = k_rows[c][p.dim - 1];
  const auto v_key = [&](std::int64_t c) {
    return is_poisoned(poison, c)
               ? kZeroRow16
               : static_cast<const std::uint16_t*>(v_row(p, b, kb * block_k + c, kv_head));
  };
  for (std::int64_t c = 0; c < valid; c += 2) {
    const std::uint16_t* v0 = v_key(c);
    const std::uint16_t* v1 = c + 1 < valid ? v_key(c + 1) : nullptr;
    std::uint16_t* pairs = v_dst + (c / 2) * dvp * 2;
    std::int64_t d = 0;
#if defined(__SSE2__)
    for (; d + 8 <= p.dim_v; d += 8) {
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(v0 + d));
      const __m128i y = v1 != nullptr ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(v1 + d))
                                      : _mm_setzero_si128();
      _mm_storeu_si128(reinterpret_cast<__m128i*>(pairs + 2 * d), _mm_unpacklo_epi16(x, y));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(pairs + 2 * d + 8), _mm_unpackhi_epi16(x, y));
    }
#endif
    for (; d < p.dim_v; ++d) {
      pairs[2 * d] = v0[d];
      pairs[2 * d + 1] = v1 != nullptr ? v1[d] : std::uint16_t{0};
    }
  }
}

struct WorkItem {
  std::int64_t pair;  // index of the (batch, kv head) pair within the phase
  std::int64_t head;  // query head
  std::int64_t row_begin, row_end;
  std::int64_t cost;  // key blocks to visit
};

struct ThreadScratch {
  AlignedVector<float> q_f32, scores, keep, out, row_max, row_sum, row_scale, lse, pack_block;
  std::vector<const float*> pack_rows;
  AlignedVector<std::uint16_t> q_bf16, probs_bf16;
  std::vector<std::int64_t> key_first, key_last;
  std::vector<std::uint8_t> q_poison, row_poison;  // per tile row

  ThreadScratch(const AttnParams& p, const Plan& plan) {
    const std::int64_t bq = plan.config.block_q, bk = plan.config.block_k;
    const auto n = [](std::int64_t x) { return static_cast<std::size_t>(x); };
    if (plan.family != KernelFamily::f32) {
      q_bf16.assign(n(bq * plan.geometry.dim_padded), 0);
      probs_bf16.assign(n(bq * bk), 0);
    } else {
      q_f32.resize(n(bq * p.dim));
    }
    scores.resize(n(bq * bk));
    if (p.has_dropout()) keep.resize(n(bq * bk));
    out.resize(n(bq * plan.geometry.dim_v_padded));
    row_max.resize(n(bq));
    row_sum.resize(n(bq));
    row_scale.resize(n(bq));
    lse.resize(n(bq));
    pack_rows.resize(n(std::max(bk, bq)));
    // f32 rows need no conversion, but the drivers form their buffer pointers all the same.
    pack_block.resize(n(std::max(bk, bq) * std::max(p.dim, p.dim_v)));
    key_first.resize(n(bq));
    key_last.resize(n(bq));
    q_poison.resize(n(bq));
    row_poison.resize(n(bq));
  }
};

// The scratch of the calling thread, kept for its later calls (freed when the thread exits):
// OpenMP's pool threads persist, and building it (about 15 allocations, some zero-filled) was a
// visible part of a small call. It is rebuilt whenever anything its layout depends on changes, so
// a reused one is exactly what a new one would be wherever a tile reads before it writes (the
// zero padding of q_bf16 and probs_bf16); everything else every tile writes before reading.
ThreadScratch& thread_scratch(const AttnParams& p, const Plan& plan) {
  struct Key {
    std::int64_t block_q, block_k, dim_padded, dim_v_padded, dim, dim_v;
    KernelFamily family;
    bool dropout;
    bool operator==(const Key&) const = default;
  };
  const Key key{plan.config.block_q,
                plan.config.block_k,
                plan.geometry.dim_padded,
                plan.geometry.dim_v_padded,
                p.dim,
                p.dim_v,
                plan.family,
                p.has_dropout()};
  thread_local std::optional<ThreadScratch> scratch;
  thread_local Key scratch_key{};
  if (!scratch || !(scratch_key == key)) {
    scratch.emplace(p, plan);
    scratch_key = key;
  }
  return *scratch;
}

// Key blocks [begin, end) touched by query rows [row_begin, row_end), and each row's range.
void row_ranges(const AttnParams& p, std::int64_t block_k, std::int64_t b, std::int64_t row_begin,
                std::int64_t row_end, std::int64_t* first, std::int64_t* last,
                std::int64_t& block_begin, std::int64_t& block_end) {
  std::int64_t lo = std::numeric_limits<std::int64_t>::max(), hi = 0;
  for (std::int64_t i = row_begin; i < row_end; ++i) {
    const KeyRange range = visible_keys(p, b, i);
    first[i - row_begin] = range.first;
    last[i - row_begin] = range.last;
    if (range.first < range.last) {
      lo = std::min(lo, range.first);
      hi = std::max(hi, range.last);
    }
  }
  if (hi == 0) {
    block_begin = block_end = 0;
    return;
  }
  block_begin = lo / block_k;
  block_end = (hi + block_k - 1) / block_k;
}

// Loads the tile's queries in the family's layout (see tile_config.hpp).
void load_q_tile(const AttnParams& p, const Plan& plan, std::int64_t b, const WorkItem& w,
                 ThreadScratch& s) {
  const std::int64_t rows = w.row_end - w.row_begin, D = p.dim, h = w.head;
  const std::int64_t bq = plan.config.block_q;
  const auto offset = [&](std::int64_t r) {
    return b * p.q_stride_b + (w.row_begin + r) * p.q_stride_l + h * p.q_stride_h;
  };
  // A query row that is not finite is packed as zeros; run_tile makes it NaN if it sees a key.
  if (plan.family == KernelFamily::f32) {  // groups of q_group rows, each [D][q_group]
    const auto esize = static_cast<std::int64_t>(size_of(p.dtype));
    prefetch_rows(static_cast<const char*>(p.q) + offset(0) * esize, rows, p.q_stride_l, esize,
                  D * esize);
    for (std::int64_t r = 0; r < rows; ++r) {
      s.pack_rows[r] =
          row_as_f32(p.q, p.dtype, offset(r), D, s.pack_block.data() + r * D, plan.f16c);
      s.q_poison[r] = row_is_finite(s.pack_rows[r], DType::f32, 0, D) ? 0 : 1;
      if (s.q_poison[r] != 0) s.pack_rows[r] = kZeroRowF32;
    }
    const std::int64_t group = plan.q_group;
    for (std::int64_t r0 = 0; r0 < rows; r0 += group)
      transpose_rows(s.pack_rows.data() + r0, std::min(group, rows - r0), D,
                     s.q_f32.data() + r0 * D, group);
    return;
  }
  const auto* q = static_cast<const std::uint16_t*>(p.q);
  for (std::int64_t r = 0; r < rows; ++r) {
    s.q_poison[r] = row_is_finite(p.q, p.dtype, offset(r), D) ? 0 : 1;
    const std::uint16_t* q_row = s.q_poison[r] != 0 ? kZeroRow16 : q + offset(r);
    if (plan.family == KernelFamily::amx) {
      std::memcpy(s.q_bf16.data() + r * plan.geometry.dim_padded, q_row, D * sizeof(std::uint16_t));
    } else {  // bf16_dot: [D/2][block_q][2]
      for (std::int64_t d = 0; d < D; ++d) s.q_bf16[((d / 2) * bq + r) * 2 + d % 2] = q_row[d];
    }
  }
  if (plan.family == KernelFamily::amx)  // rows past the end stay zero (padding of the last tile)
    std::fill(s.q_bf16.begin() + rows * plan.geometry.dim_padded, s.q_bf16.end(), 0);
}

void run_tile(const AttnParams& p, const Plan& plan, const void* k_packed, const void* v_packed,
              const std::uint64_t* key_poison, std::int64_t b, const WorkItem& w,
              ThreadScratch& s) {
  const std::int64_t rows = w.row_end - w.row_begin, h = w.head;
  load_q_tile(p, plan, b, w, s);

  TileJob job{};
  job.rows = rows;
  job.dim = p.dim;
  job.dim_padded = plan.geometry.dim_padded;
  job.dim_v_padded = plan.geometry.dim_v_padded;
  job.q = plan.family == KernelFamily::f32 ? static_cast<const void*>(s.q_f32.data())
                                           : static_cast<const void*>(s.q_bf16.data());
  job.q_group = plan.q_group;
  job.k_packed = k_packed;
  job.v_packed = v_packed;
  job.key_poison = key_poison;
  job.row_poison = s.row_poison.data();
  row_ranges(p, plan.config.block_k, b, w.row_begin, w.row_end, s.key_first.data(),
             s.key_last.data(), job.block_begin, job.block_end);
  job.key_first = s.key_first.data();
  job.key_last = s.key_last.data();
  job.scale = p.scale;
  job.scale_log2 = p.scale * 1.44269504088896340736f;
  job.softcap = p.softcap;
  job.alibi_slope = p.alibi_slope(b, h);
  job.alibi_pos0 = w.row_begin + p.key_length(b) - p.len_q;
  if (p.mask != nullptr) {
    const std::int64_t offset =
        b * p.mask_stride_b + h * p.mask_stride_h + w.row_begin * p.mask_stride_q;
    if (p.mask_dtype == DType::boolean)
      job.bool_mask = static_cast<const std::uint8_t*>(p.mask) + offset;
    else
      job.additive_mask = static_cast<const float*>(p.mask) + offset;
    job.mask_stride_q = p.mask_stride_q;
    job.mask_stride_k = p.mask_stride_k;
  }
  if (p.has_dropout()) {  // the plan uses the f32 family, which applies it
    job.dropout = &p.dropout;
    job.batch = b;
    job.head = h;
    job.row0 = w.row_begin;
    job.keep = s.keep.data();
  }
  job.out = s.out.data();
  job.lse = s.lse.data();
  job.scores = s.scores.data();
  job.row_max = s.row_max.data();
  job.row_sum = s.row_sum.data();
  job.row_scale = s.row_scale.data();
  job.probs_bf16 = s.probs_bf16.data();
  plan.kernel(job);

  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t i = w.row_begin + r;
    if (s.q_poison[r] != 0 && s.lse[r] != -std::numeric_limits<float>::infinity()) {
      float* o = s.out.data() + r * plan.geometry.dim_v_padded;
      std::fill(o, o + p.dim_v, std::numeric_limits<float>::quiet_NaN());
      s.lse[r] = std::numeric_limits<float>::quiet_NaN();
    }
    store_row(p.out, p.out_dtype, b * p.o_stride_b + i * p.o_stride_l + h * p.o_stride_h, p.dim_v,
              s.out.data() + r * plan.geometry.dim_v_padded, plan.f16c);
    if (p.lse != nullptr)
      p.lse[b * p.lse_stride_b + h * p.lse_stride_h + i * p.lse_stride_l] = s.lse[r];
  }
}

}  // namespace

void cpu_flash_forward(const AttnParams& p, int threads, CpuIsa isa_cap) {
  const Plan plan = make_plan(p, select_cpu_isa(isa_cap));
  const std::int64_t block_q = plan.config.block_q;
  const std::int64_t elem = plan.geometry.element_bytes;
  const std::int64_t pairs = p.batch * p.heads_kv;
  const std::int64_t head_bytes =
      std::max<std::int64_t>(1, (plan.k_head_elems + plan.v_head_elems) * elem);
  const std::int64_t pairs_per_phase =
      std::clamp<std::int64_t>(plan.config.pack_budget_bytes / head_bytes, 1, pairs);
  // Packed K/V of one phase, as raw bytes in the family's element type (64-byte aligned rows are
  // not required by either family).
  // The packed phase buffer is kept per calling thread and reused by later calls, so that a
  // steady stream of calls does not pay for allocation and page faults each time. It holds at
  // most max(pack_budget_bytes, one head's packed K/V) and is freed when the thread exits.
  thread_local AlignedVector<float> packed;
  const auto packed_floats = static_cast<std::size_t>(
      (pairs_per_phase * (plan.k_head_elems + plan.v_head_elems) * elem + 3) / 4);
  if (packed.size() < packed_floats) {
    packed.clear();
    packed.shrink_to_fit();
    packed.resize(packed_floats);
  }
  char* const k_base = reinterpret_cast<char*>(packed.data());
  char* const v_base = k_base + pairs_per_phase * plan.k_head_elems * elem;
  std::vector<WorkItem> work;
  // Per packed key block, its poisoned keys (two words); per pair of the phase, whether any.
  std::vector<std::uint64_t> poison(static_cast<std::size_t>(pairs_per_phase * plan.blocks * 2));
  const std::int64_t q_tiles = (p.len_q + block_q - 1) / block_q;

// Two barriers a phase: after the packing (the tiles read the packed K/V and the work list)
// and after the tiles (the next phase repacks); the last phase's second is the region's end.
// The work list is built by one thread while the others start packing.
#pragma omp parallel num_threads(resolve_threads(threads))
  {
    ThreadScratch& scratch = thread_scratch(p, plan);
    for (std::int64_t phase = 0; phase < pairs; phase += pairs_per_phase) {
      const std::int64_t phase_pairs = std::min(pairs_per_phase, pairs - phase);
#pragma omp single nowait
      {
        work.clear();
        for (std::int64_t local = 0; local < phase_pairs; ++local) {
          const std::int64_t pair = phase + local, b = pair / p.heads_kv;
          const std::int64_t kv_head = pair % p.heads_kv;
          for (std::int64_t t = 0; t < q_tiles; ++t) {
            WorkItem w{local, 0, t * block_q, std::min(p.len_q, (t + 1) * block_q), 0};
            std::int64_t block_begin = 0, block_end = 0;
            row_ranges(p, plan.config.block_k, b, w.row_begin, w.row_end, scratch.key_first.data(),
                       scratch.key_last.data(), block_begin, block_end);
            w.cost = block_end - block_begin;
            for (std::int64_t g = 0; g < p.heads_per_kv; ++g) {
              w.head = kv_head * p.heads_per_kv + g;
              work.push_back(w);
            }
          }
        }
        // Longest first within each (batch, kv head) pair, the pairs in order: the tiles that
        // run one after another share the pair's K and V (hot in the caches), and the
        // dynamic schedule still balances the threads up to the last pair's short tiles.
        std::stable_sort(work.begin(), work.end(), [](const WorkItem& a, const WorkItem& c) {
          return a.pair != c.pair ? a.pair < c.pair : a.cost > c.cost;
        });
      }
#pragma omp for schedule(static)
      for (std::int64_t item = 0; item < phase_pairs * plan.blocks; ++item) {
        const std::int64_t local = item / plan.blocks, kb = item % plan.blocks;
        const std::int64_t pair = phase + local, b = pair / p.heads_kv, kv = pair % p.heads_kv;
        char* k_dst =
            k_base + (local * plan.k_head_elems + kb * plan.geometry.k_block_elems) * elem;
        char* v_dst =
            v_base + (local * plan.v_head_elems + kb * plan.geometry.v_block_elems) * elem;
        std::uint64_t* block_poison = poison.data() + item * 2;
        if (plan.family != KernelFamily::f32)
          pack_block_pairs(p, plan, b, kv, kb, reinterpret_cast<std::uint16_t*>(k_dst),
                           reinterpret_cast<std::uint16_t*>(v_dst), block_poison);
        else
          pack_block_f32(p, plan, b, kv, kb, reinterpret_cast<float*>(k_dst),
                         reinterpret_cast<float*>(v_dst), scratch.pack_rows.data(),
                         scratch.pack_block.data(), block_poison);
      }
#pragma omp for schedule(dynamic, 1) nowait
      for (std::size_t w = 0; w < work.size(); ++w) {
        const WorkItem& item = work[w];
        const std::int64_t b = (phase + item.pair) / p.heads_kv;
        const auto words = poison.begin() + item.pair * plan.blocks * 2;
        const bool poisoned =
            std::any_of(words, words + plan.blocks * 2, [](std::uint64_t x) { return x != 0; });
        run_tile(p, plan, k_base + item.pair * plan.k_head_elems * elem,
                 v_base + item.pair * plan.v_head_elems * elem,
                 poisoned ? poison.data() + item.pair * plan.blocks * 2 : nullptr, b, item,
                 scratch);
      }
      // The next phase repacks what these tiles read; after the last, the region's end waits.
      if (phase + pairs_per_phase < pairs) {  // the same on every thread: all reach it
#pragma omp barrier
      }
    }
  }
}

}  // namespace tileattn::detail
