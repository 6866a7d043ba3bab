// The ISA-neutral driver of the CPU flash forward: threads, buffers, packing, dtype conversion
// and work order. The compute kernels (flash_kernel.inl) only see TileJob.
//
// Work is processed in phases of (batch, kv head) pairs whose packed K/V fit a small budget:
// all threads pack a phase's K/V once, then share its query tiles (every query head of each
// pair's group), longest first so that causal work balances between threads.
#include "cpu/flash_forward.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/float_convert.hpp"
#include "common/threads.hpp"
#include "cpu/kernels.hpp"
#include "cpu/tile_config.hpp"

namespace tileattn::detail {
namespace {

constexpr std::int64_t kBlockQ = cpu_tile_config().block_q;
constexpr std::int64_t kBlockK = cpu_tile_config().block_k;

TileKernel select_kernel(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::avx512_bf16: return cpu_tile_kernel_avx512_bf16();
    case CpuIsa::avx512: return cpu_tile_kernel_avx512();
    case CpuIsa::avx2: return cpu_tile_kernel_avx2();
    default: return cpu_tile_kernel_portable();
  }
}

// Returns `count` contiguous elements of storage type `dtype` as f32: a pointer into the source
// for f32, else converted into `buffer`.
const float* row_as_f32(const void* base, DType dtype, std::int64_t offset, std::int64_t count,
                        float* buffer) {
  switch (dtype) {
    case DType::f16: {
      const auto* src = static_cast<const std::uint16_t*>(base) + offset;
      for (std::int64_t i = 0; i < count; ++i) buffer[i] = f16_to_f32(src[i]);
      return buffer;
    }
    case DType::bf16: {
      const auto* src = static_cast<const std::uint16_t*>(base) + offset;
      for (std::int64_t i = 0; i < count; ++i) buffer[i] = bf16_to_f32(src[i]);
      return buffer;
    }
    default: return static_cast<const float*>(base) + offset;
  }
}

void store_row(void* base, DType dtype, std::int64_t offset, std::int64_t count, const float* src) {
  switch (dtype) {
    case DType::f16: {
      auto* dst = static_cast<std::uint16_t*>(base) + offset;
      for (std::int64_t i = 0; i < count; ++i) dst[i] = f32_to_f16(src[i]);
      break;
    }
    case DType::bf16: {
      auto* dst = static_cast<std::uint16_t*>(base) + offset;
      for (std::int64_t i = 0; i < count; ++i) dst[i] = f32_to_bf16(src[i]);
      break;
    }
    default: std::copy_n(src, count, static_cast<float*>(base) + offset); break;
  }
}

struct Geometry {
  std::int64_t blocks;         // key blocks per head
  std::int64_t dim_v_padded;
  std::int64_t k_head_floats;  // packed K of one (batch, kv head)
  std::int64_t v_head_floats;
};

// Packs key block kb of (b, kv_head) in the layouts of tile_config.hpp: K transposed into
// panels of [D][k_panel], V into panels of [block_k][v_panel]; zero beyond Lk and Dv.
void pack_block(const AttnParams& p, const Geometry& g, std::int64_t b, std::int64_t kv_head,
                std::int64_t kb, float* k_dst, float* v_dst, float* row_buffer) {
  constexpr std::int64_t k_panel = cpu_tile_config().k_panel, v_panel = cpu_tile_config().v_panel;
  const std::int64_t D = p.dim, Dv = p.dim_v, dvp = g.dim_v_padded;
  for (std::int64_t c = 0; c < kBlockK; ++c) {
    const std::int64_t key = kb * kBlockK + c;
    const bool valid = key < p.len_k;
    float* k_col = k_dst + (c / k_panel) * D * k_panel + c % k_panel;
    if (valid) {
      const float* k_row = row_as_f32(
          p.k, p.dtype, b * p.k_stride_b + key * p.k_stride_l + kv_head * p.k_stride_h, D,
          row_buffer);
      for (std::int64_t d = 0; d < D; ++d) k_col[d * k_panel] = k_row[d];
    } else {
      for (std::int64_t d = 0; d < D; ++d) k_col[d * k_panel] = 0.0f;
    }
    const float* v_row =
        valid ? row_as_f32(p.v, p.dtype,
                           b * p.v_stride_b + key * p.v_stride_l + kv_head * p.v_stride_h, Dv,
                           row_buffer)
              : nullptr;
    for (std::int64_t c0 = 0; c0 < dvp; c0 += v_panel) {
      const std::int64_t width = std::min(v_panel, dvp - c0);
      float* dst = v_dst + kBlockK * c0 + c * width;
      for (std::int64_t d = 0; d < width; ++d)
        dst[d] = valid && c0 + d < Dv ? v_row[c0 + d] : 0.0f;
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
  std::vector<float> q, scores, out, row_max, row_sum, row_scale, lse, pack_row;
  std::vector<std::int64_t> key_first, key_last;

  explicit ThreadScratch(const AttnParams& p, std::int64_t dvp)
      : q(static_cast<std::size_t>(kBlockQ * p.dim)),
        scores(static_cast<std::size_t>(kBlockQ * kBlockK)),
        out(static_cast<std::size_t>(kBlockQ * dvp)),
        row_max(kBlockQ), row_sum(kBlockQ), row_scale(kBlockQ), lse(kBlockQ),
        pack_row(static_cast<std::size_t>(std::max(p.dim, p.dim_v))), key_first(kBlockQ), key_last(kBlockQ) {}
};

// Key blocks [begin, end) touched by query rows [row_begin, row_end), and each row's range.
void row_ranges(const AttnParams& p, std::int64_t b, std::int64_t row_begin, std::int64_t row_end,
                std::int64_t* first, std::int64_t* last, std::int64_t& block_begin,
                std::int64_t& block_end) {
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
  block_begin = lo / kBlockK;
  block_end = (hi + kBlockK - 1) / kBlockK;
}

void run_tile(const AttnParams& p, const Geometry& g, TileKernel kernel, const float* k_packed,
              const float* v_packed, std::int64_t b, const WorkItem& w, ThreadScratch& s) {
  const std::int64_t rows = w.row_end - w.row_begin, D = p.dim, h = w.head;
  for (std::int64_t r = 0; r < rows; ++r) {  // transposed: [D][block_q]
    const float* q_row = row_as_f32(
        p.q, p.dtype, b * p.q_stride_b + (w.row_begin + r) * p.q_stride_l + h * p.q_stride_h, D,
        s.pack_row.data());
    for (std::int64_t d = 0; d < D; ++d) s.q[d * kBlockQ + r] = q_row[d];
  }

  TileJob job{};
  job.rows = rows;
  job.dim = D;
  job.dim_v_padded = g.dim_v_padded;
  job.q = s.q.data();
  job.k_packed = k_packed;
  job.v_packed = v_packed;
  row_ranges(p, b, w.row_begin, w.row_end, s.key_first.data(), s.key_last.data(), job.block_begin,
             job.block_end);
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
  job.out = s.out.data();
  job.lse = s.lse.data();
  job.scores = s.scores.data();
  job.row_max = s.row_max.data();
  job.row_sum = s.row_sum.data();
  job.row_scale = s.row_scale.data();
  kernel(job);

  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t i = w.row_begin + r;
    store_row(p.out, p.out_dtype, b * p.o_stride_b + i * p.o_stride_l + h * p.o_stride_h,
              p.dim_v, s.out.data() + r * g.dim_v_padded);
    if (p.lse != nullptr) p.lse[b * p.lse_stride_b + h * p.lse_stride_h + i * p.lse_stride_l] = s.lse[r];
  }
}

}  // namespace

void cpu_flash_forward(const AttnParams& p, int threads, CpuIsa isa_cap) {
  const TileKernel kernel = select_kernel(select_cpu_isa(isa_cap));
  Geometry g{};
  g.blocks = (p.len_k + kBlockK - 1) / kBlockK;
  g.dim_v_padded = padded_dim_v(p.dim_v);
  g.k_head_floats = g.blocks * packed_k_block_floats(p.dim);
  g.v_head_floats = g.blocks * packed_v_block_floats(p.dim_v);
  const std::int64_t pairs = p.batch * p.heads_kv;
  const std::int64_t head_bytes =
      std::max<std::int64_t>(1, (g.k_head_floats + g.v_head_floats) * 4);
  const std::int64_t pairs_per_phase =
      std::clamp<std::int64_t>(cpu_tile_config().pack_budget_bytes / head_bytes, 1, pairs);
  std::vector<float> k_packed(static_cast<std::size_t>(pairs_per_phase * g.k_head_floats));
  std::vector<float> v_packed(static_cast<std::size_t>(pairs_per_phase * g.v_head_floats));
  std::vector<WorkItem> work;
  const std::int64_t q_tiles = (p.len_q + kBlockQ - 1) / kBlockQ;

#pragma omp parallel num_threads(resolve_threads(threads))
  {
    ThreadScratch scratch(p, g.dim_v_padded);
    for (std::int64_t phase = 0; phase < pairs; phase += pairs_per_phase) {
      const std::int64_t phase_pairs = std::min(pairs_per_phase, pairs - phase);
#pragma omp for schedule(static)
      for (std::int64_t item = 0; item < phase_pairs * g.blocks; ++item) {
        const std::int64_t local = item / g.blocks, kb = item % g.blocks;
        const std::int64_t pair = phase + local;
        pack_block(p, g, pair / p.heads_kv, pair % p.heads_kv, kb,
                   k_packed.data() + local * g.k_head_floats + kb * packed_k_block_floats(p.dim),
                   v_packed.data() + local * g.v_head_floats + kb * packed_v_block_floats(p.dim_v),
                   scratch.pack_row.data());
      }
#pragma omp single
      {
        work.clear();
        for (std::int64_t local = 0; local < phase_pairs; ++local) {
          const std::int64_t pair = phase + local, b = pair / p.heads_kv;
          const std::int64_t kv_head = pair % p.heads_kv;
          for (std::int64_t t = 0; t < q_tiles; ++t) {
            WorkItem w{local, 0, t * kBlockQ, std::min(p.len_q, (t + 1) * kBlockQ), 0};
            std::int64_t block_begin = 0, block_end = 0;
            row_ranges(p, b, w.row_begin, w.row_end, scratch.key_first.data(),
                       scratch.key_last.data(), block_begin, block_end);
            w.cost = block_end - block_begin;
            for (std::int64_t g_head = 0; g_head < p.heads_per_kv; ++g_head) {
              w.head = kv_head * p.heads_per_kv + g_head;
              work.push_back(w);
            }
          }
        }
        std::stable_sort(work.begin(), work.end(),
                         [](const WorkItem& a, const WorkItem& b) { return a.cost > b.cost; });
      }
#pragma omp for schedule(dynamic, 1)
      for (std::size_t w = 0; w < work.size(); ++w) {
        const WorkItem& item = work[w];
        const std::int64_t b = (phase + item.pair) / p.heads_kv;
        run_tile(p, g, kernel, k_packed.data() + item.pair * g.k_head_floats,
                 v_packed.data() + item.pair * g.v_head_floats, b, item, scratch);
      }
    }
  }
}

}  // namespace tileattn::detail
