#include "cpu/decode.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/float_convert.hpp"
#include "common/merge_row.hpp"
#include "common/rotary.hpp"
#include "common/threads.hpp"
#include "cpu/aligned_buffer.hpp"
#include "cpu/decode_kernels.hpp"
#include "cpu/flash_forward.hpp"
#include "cpu/kvcache_append.hpp"
#include "tileattn/tileattn.hpp"

namespace tileattn::detail {
namespace {

// Query rows (times the head group) one work item takes at most: enough to reuse each loaded
// K and V row many times, few enough that the scores stay in L1.
constexpr std::int64_t kMaxItemRows = 64;
// The fewest keys worth a split of their own (the merge and the item's set-up cost about this
// many keys' work).
constexpr std::int64_t kMinSplitKeys = 512;
// Kv heads one work item takes at most (decode_kernel.inl's run: their slices of each cache row
// are read together).
constexpr std::int64_t kMaxBundleHeads = 8;

// One (sequence, kv head, query rows) group of work; its keys [lo, hi) are cut into `splits`
// parts of `split_keys` keys. Its rows' partial results start at row `first_part_row` of the
// partial buffers, one block of `rows` per split.
struct Group {
  std::int64_t b, h, i0, i1, rows;
  std::int64_t lo, hi;
  std::int64_t splits, split_keys;
  std::int64_t first_part_row;
};

// Groups [group, group + heads) (consecutive kv heads of one sequence and query rows) and one
// split of their keys.
struct Work {
  std::int64_t group, heads, split;
};

DecodeKernel pick_kernel(CpuIsa isa_cap, bool& avx512) {
  const CpuIsa isa = select_cpu_isa(isa_cap);
  avx512 = isa == CpuIsa::amx_bf16 || isa == CpuIsa::avx512_bf16 || isa == CpuIsa::avx512;
  if (isa == CpuIsa::amx_bf16 || isa == CpuIsa::avx512_bf16) return cpu_decode_kernel_avx512_bf16();
  if (avx512) return cpu_decode_kernel_avx512();
  if (isa == CpuIsa::avx2) return cpu_decode_kernel_avx2();
  return cpu_decode_kernel_portable();
}

DecodeStorage storage_of(DType dtype) {
  return dtype == DType::f16    ? DecodeStorage::f16
         : dtype == DType::bf16 ? DecodeStorage::bf16
                                : DecodeStorage::f32;
}

std::int64_t round_up(std::int64_t x, std::int64_t m) {
  return (x + m - 1) / m * m;
}

// Keys query row i of sequence b sees: attention_forward's range for the sequence, above its
// left padding.
KeyRange seen_keys(const KvCacheParams& p, const AttnParams& s, std::int64_t b, std::int64_t i) {
  KeyRange r = visible_keys(s, 0, i);
  r.first = std::min(std::max(r.first, p.key_first(b)), r.last);
  return r;
}

std::vector<Group> plan(const KvCacheParams& p, int threads) {
  const AttnParams& a = p.attn;
  const std::int64_t group = a.heads_per_kv;
  const std::int64_t rows_i = std::max<std::int64_t>(1, kMaxItemRows / group);
  std::vector<Group> groups;
  for (std::int64_t b = 0; b < a.batch; ++b) {
    const AttnParams s = sequence_attention(p, b);
    for (std::int64_t i0 = 0; i0 < s.len_q; i0 += rows_i) {
      const std::int64_t i1 = std::min(s.len_q, i0 + rows_i);
      std::int64_t lo = s.len_k, hi = 0;
      for (std::int64_t i = i0; i < i1; ++i) {
        const KeyRange r = seen_keys(p, s, b, i);
        if (r.first >= r.last) continue;
        lo = std::min(lo, r.first);
        hi = std::max(hi, r.last);
      }
      if (lo >= hi) lo = hi = 0;
      for (std::int64_t h = 0; h < a.heads_kv; ++h)
        groups.push_back({b, h, i0, i1, (i1 - i0) * group, lo, hi, 1, hi - lo, 0});
    }
  }
  // Splits: enough items (bundles of kv heads x splits) for every thread, twice over for
  // balance, where the keys allow.
  const std::int64_t bundles = static_cast<std::int64_t>(groups.size()) / a.heads_kv *
                               ((a.heads_kv + kMaxBundleHeads - 1) / kMaxBundleHeads);
  const std::int64_t want =
      bundles == 0 ? 1 : std::max<std::int64_t>(1, (2 * threads + bundles - 1) / bundles);
  std::int64_t part_rows = 0;
  for (Group& g : groups) {
    const std::int64_t keys = g.hi - g.lo;
    std::int64_t splits = p.num_splits > 0
                              ? p.num_splits
                              : std::min(want, (keys + kMinSplitKeys - 1) / kMinSplitKeys);
    // At most one split per key block, and no more parts than one merge takes.
    splits = std::clamp<std::int64_t>(
        splits, 1,
        std::clamp<std::int64_t>((keys + kDecodeBlock - 1) / kDecodeBlock, 1, kMaxMergeParts));
    g.split_keys = round_up((keys + splits - 1) / std::max<std::int64_t>(splits, 1), kDecodeBlock);
    g.splits = keys == 0 ? 1 : (keys + g.split_keys - 1) / g.split_keys;
    g.first_part_row = part_rows;
    part_rows += g.splits * g.rows;
  }
  return groups;
}

// The thread's buffers, sized for the largest item.
struct Scratch {
  AlignedVector<std::uint16_t> q_bf16;
  AlignedVector<float> q, scores, row_max, row_sum, k_stage, v_stage, alibi_slope, rotated, merged;
  AlignedVector<std::uint8_t> poison;
  std::vector<std::int64_t> key_lo, key_hi, alibi_pos;
  std::vector<const void*> k_pages, v_pages;
};

}  // namespace

void cpu_kvcache_attention(const KvCacheParams& p, int threads, CpuIsa isa_cap) {
  const AttnParams& a = p.attn;
  const CacheLayout& c = p.cache;
  bool avx512 = false;
  const DecodeKernel kernel = pick_kernel(isa_cap, avx512);
  const std::int64_t lanes = decode_lanes(avx512);
  const std::int64_t dp = round_up(a.dim, lanes), dvp = round_up(a.dim_v, lanes);
  const int nthreads = resolve_threads(threads);
  const std::vector<Group> groups = plan(p, nthreads);
  std::vector<Work> work;
  std::int64_t part_rows = 0, max_rows = 0;
  // Bundles: runs of groups of one sequence and query rows (consecutive kv heads, plan's order).
  for (std::size_t g0 = 0; g0 < groups.size();) {
    std::size_t g1 = g0 + 1;
    while (g1 < groups.size() && static_cast<std::int64_t>(g1 - g0) < kMaxBundleHeads &&
           groups[g1].b == groups[g0].b && groups[g1].i0 == groups[g0].i0)
      ++g1;
    for (std::int64_t s = 0; s < groups[g0].splits; ++s)
      work.push_back({static_cast<std::int64_t>(g0), static_cast<std::int64_t>(g1 - g0), s});
    for (std::size_t gi = g0; gi < g1; ++gi) {
      part_rows += groups[gi].splits * groups[gi].rows;
      max_rows = std::max(max_rows, groups[gi].rows);
    }
    g0 = g1;
  }
  AlignedVector<float> part_out(static_cast<std::size_t>(part_rows * dvp));
  AlignedVector<float> part_lse(static_cast<std::size_t>(part_rows));
  const std::int64_t rows_padded = round_up(std::max<std::int64_t>(max_rows, 1), 16);
  const std::int64_t pages = c.paged() ? c.max_blocks : 1;
  const std::int64_t work_count = static_cast<std::int64_t>(work.size());

#pragma omp parallel num_threads(nthreads)
  {
    Scratch t;
    const auto per_head = [&](std::int64_t n) {
      return static_cast<std::size_t>(kMaxBundleHeads * n);
    };
    t.q.resize(per_head(rows_padded * dp));
    if (a.dtype == DType::bf16) t.q_bf16.resize(per_head(rows_padded * dp));
    t.scores.resize(static_cast<std::size_t>(rows_padded * kDecodeBlock));
    t.row_max.resize(per_head(rows_padded));
    t.row_sum.resize(per_head(rows_padded));
    t.poison.resize(per_head(rows_padded));
    t.k_stage.resize(static_cast<std::size_t>(kDecodeBlock * dp));
    t.v_stage.resize(static_cast<std::size_t>(kDecodeBlock * dvp));
    t.alibi_slope.resize(per_head(rows_padded));
    t.rotated.resize(static_cast<std::size_t>(a.dim));
    t.merged.resize(static_cast<std::size_t>(a.dim_v));
    t.key_lo.resize(static_cast<std::size_t>(rows_padded));
    t.key_hi.resize(static_cast<std::size_t>(rows_padded));
    t.alibi_pos.resize(static_cast<std::size_t>(rows_padded));
    t.k_pages.resize(static_cast<std::size_t>(pages));
    t.v_pages.resize(static_cast<std::size_t>(pages));
    std::fill(t.q.begin(), t.q.end(), 0.0f);
    std::fill(t.scores.begin(), t.scores.end(), 0.0f);
    DecodeJob jobs[kMaxBundleHeads];

#pragma omp for schedule(dynamic, 1)
    for (std::int64_t w = 0; w < work_count; ++w) {
      const Work& item = work[static_cast<std::size_t>(w)];
      const Group& g0 = groups[static_cast<std::size_t>(item.group)];
      const AttnParams s = sequence_attention(p, g0.b);
      const std::int64_t group = a.heads_per_kv;
      // Rows r = (i - i0) * group + head in group: their key ranges (the same for every kv
      // head) and, per kv head, q rotated and rounded as the cache's keys.
      for (std::int64_t i = g0.i0; i < g0.i1; ++i) {
        const KeyRange range = seen_keys(p, s, g0.b, i);
        for (std::int64_t gh = 0; gh < group; ++gh) {
          const std::int64_t r = (i - g0.i0) * group + gh;
          t.key_lo[static_cast<std::size_t>(r)] = range.first;
          t.key_hi[static_cast<std::size_t>(r)] = range.last;
          t.alibi_pos[static_cast<std::size_t>(r)] = i + s.len_k - s.len_q;
        }
      }
      for (std::int64_t hb = 0; hb < item.heads; ++hb) {
        const std::int64_t h = g0.h + hb;
        float* const q_head = t.q.data() + hb * rows_padded * dp;
        for (std::int64_t i = g0.i0; i < g0.i1; ++i)
          for (std::int64_t gh = 0; gh < group; ++gh) {
            const std::int64_t r = (i - g0.i0) * group + gh, hq = h * group + gh;
            float* q = q_head + r * dp;
            const void* src = advance(s.q, a.dtype, i * a.q_stride_l + hq * a.q_stride_h);
            for (std::int64_t d = 0; d < a.dim; ++d) q[d] = load_as_f32(src, a.dtype, d);
            if (p.rotary.present()) {
              rotate_f32(q, p.rotary, rotary_query_position(p, g0.b, i));
              for (std::int64_t d = 0; d < a.dim; ++d) {
                store_from_f32(t.rotated.data(), a.dtype, 0, q[d]);
                q[d] = load_as_f32(t.rotated.data(), a.dtype, 0);
              }
            }
            t.alibi_slope[static_cast<std::size_t>(hb * rows_padded + r)] = s.alibi_slope(0, hq);
          }
      }
      const std::int64_t k0 = g0.lo + item.split * g0.split_keys;
      const std::int64_t k1 = std::min(g0.hi, k0 + g0.split_keys);
      // Page pointers at the bundle's first kv head; each job adds its head's offset.
      if (c.paged()) {
        for (std::int64_t pg = k0 / c.block_size; pg * c.block_size < k1; ++pg) {
          const std::int64_t blk = c.block(g0.b, pg * c.block_size);
          t.k_pages[static_cast<std::size_t>(pg)] =
              advance(c.k, a.dtype, blk * c.k_stride_blk + g0.h * c.k_stride_h);
          t.v_pages[static_cast<std::size_t>(pg)] =
              advance(c.v, a.dtype, blk * c.v_stride_blk + g0.h * c.v_stride_h);
        }
      } else {
        const std::int64_t entry = c.block(g0.b, 0);
        t.k_pages[0] = advance(c.k, a.dtype, entry * c.k_stride_blk + g0.h * c.k_stride_h);
        t.v_pages[0] = advance(c.v, a.dtype, entry * c.v_stride_blk + g0.h * c.v_stride_h);
      }
      for (std::int64_t hb = 0; hb < item.heads; ++hb) {
        const Group& g = groups[static_cast<std::size_t>(item.group + hb)];
        DecodeJob& job = jobs[hb];
        job = DecodeJob{};
        job.storage = storage_of(a.dtype);
        job.rows = g.rows;
        job.dim = a.dim, job.dim_v = a.dim_v, job.dim_padded = dp, job.dim_v_padded = dvp;
        job.q = t.q.data() + hb * rows_padded * dp;
        if (a.dtype == DType::bf16) {
          // q's values are bf16 values (read from or rounded to bf16): the bits are exact.
          std::uint16_t* qb = t.q_bf16.data() + hb * rows_padded * dp;
          const float* qf = job.q;
          for (std::int64_t e = 0; e < rows_padded * dp; ++e) {
            std::uint32_t bits;
            std::memcpy(&bits, qf + e, 4);
            qb[e] = static_cast<std::uint16_t>(bits >> 16);
          }
          job.q_bf16 = qb;
        }
        job.k_pages = t.k_pages.data();
        job.v_pages = t.v_pages.data();
        job.k_offset = hb * c.k_stride_h;
        job.v_offset = hb * c.v_stride_h;
        job.page_size = c.paged() ? c.block_size : std::max<std::int64_t>(c.capacity(), 1);
        job.k_row_stride = c.k_stride_row, job.v_row_stride = c.v_stride_row;
        job.key_begin = k0, job.key_end = std::max(k0, k1);
        job.key_lo = t.key_lo.data(), job.key_hi = t.key_hi.data();
        job.alibi_slope =
            a.alibi_slopes != nullptr ? t.alibi_slope.data() + hb * rows_padded : nullptr;
        job.alibi_pos = t.alibi_pos.data();
        job.scale = a.scale;
        job.scale_log2 = a.scale * 1.4426950408889634f;
        job.softcap = a.softcap;
        const std::int64_t part = g.first_part_row + item.split * g.rows;
        job.out = part_out.data() + part * dvp;
        job.lse = part_lse.data() + part;
        job.scores = t.scores.data();
        job.row_max = t.row_max.data() + hb * rows_padded;
        job.row_sum = t.row_sum.data() + hb * rows_padded;
        job.poison = t.poison.data() + hb * rows_padded;
        job.k_stage = t.k_stage.data(), job.v_stage = t.v_stage.data();
      }
      kernel(jobs, static_cast<int>(item.heads));
      // Zero the q rows again so the next item's padding rows read zeros.
      for (std::int64_t hb = 0; hb < item.heads; ++hb)
        std::fill_n(t.q.data() + hb * rows_padded * dp, g0.rows * dp, 0.0f);
    }

    // Merge each row's splits (or convert the single one) into out and lse.
    const std::int64_t group_count = static_cast<std::int64_t>(groups.size());
#pragma omp for schedule(static)
    for (std::int64_t gi = 0; gi < group_count; ++gi) {
      const Group& g = groups[static_cast<std::size_t>(gi)];
      const AttnParams s = sequence_attention(p, g.b);
      float lse[kMaxMergeParts], weight[kMaxMergeParts];
      for (std::int64_t r = 0; r < g.rows; ++r) {
        const std::int64_t i = g.i0 + r / a.heads_per_kv,
                           hq = g.h * a.heads_per_kv + r % a.heads_per_kv;
        void* out = advance(s.out, a.out_dtype, i * a.o_stride_l + hq * a.o_stride_h);
        for (std::int64_t k = 0; k < g.splits; ++k)
          lse[k] = part_lse[static_cast<std::size_t>(g.first_part_row + k * g.rows + r)];
        float merged_lse = lse[0];
        const float* only = part_out.data() + (g.first_part_row + r) * dvp;
        if (g.splits == 1) {
          for (std::int64_t d = 0; d < a.dim_v; ++d) store_from_f32(out, a.out_dtype, d, only[d]);
        } else {
          const MergedRow kind =
              merge_weights(lse, static_cast<int>(g.splits), weight, &merged_lse);
          float* acc = t.merged.data();
          std::fill(acc, acc + a.dim_v, kind == MergedRow::poisoned ? NAN : 0.0f);
          for (std::int64_t k = 0; k < g.splits && kind == MergedRow::weighted; ++k) {
            if (lse[k] == -INFINITY) continue;  // never read: it saw no key
            const float* part = part_out.data() + (g.first_part_row + k * g.rows + r) * dvp;
            for (std::int64_t d = 0; d < a.dim_v; ++d) acc[d] += weight[k] * part[d];
          }
          for (std::int64_t d = 0; d < a.dim_v; ++d) store_from_f32(out, a.out_dtype, d, acc[d]);
        }
        if (s.lse != nullptr) s.lse[hq * a.lse_stride_h + i * a.lse_stride_l] = merged_lse;
      }
    }
  }
}

}  // namespace tileattn::detail
