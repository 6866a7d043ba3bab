// The ISA-neutral driver of the CPU flash backward: threads, packing, dtype conversion, work
// order and the dq reduction. The compute kernel (backward_kernel.inl) only sees BackwardStep.
//
// Work proceeds in phases of (batch, kv head) pairs whose packed buffers fit a budget. All
// threads first pack the phase: the Q side per query tile (Q and dO in both orientations, lse
// in log2 units and delta = rowsum(dO o O)) and the K side per key block (K in both
// orientations, V transposed). Then each work item is one key block of one pair, run against
// every query tile (of every query head of the group) that sees it; its thread owns the
// block's dk and dv. Items are taken longest first so that causal work balances.
//
// dq: each thread adds into its own partial buffer of the phase's query tiles, and the partials
// are summed in thread order afterwards. Deterministic mode: items are handed out in (pair, key
// block) order and every query tile has one shared buffer that takes its key blocks'
// contributions in increasing order (a gate in front of the dq product), so every sum has one
// fixed order whatever the number of threads.
#include "cpu/flash_backward.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "common/score_mods.hpp"
#include "common/threads.hpp"
#include "cpu/aligned_buffer.hpp"
#include "cpu/backward_buffers.hpp"
#include "cpu/backward_kernels.hpp"
#include "cpu/flash_forward.hpp"
#include "cpu/row_convert.hpp"
#include "cpu/tile_config.hpp"

namespace tileattn::detail {
namespace {

using cpu_backward::backward_buffers;
using cpu_backward::BackwardBuffers;
using cpu_backward::k_block_at;
using cpu_backward::KBlock;
using cpu_backward::kBlockK;
using cpu_backward::kBlockQ;
using cpu_backward::kConfig;
using cpu_backward::Layout;
using cpu_backward::q_tile_at;
using cpu_backward::QTile;
using cpu_backward::reserve_floats;
using cpu_backward::Scratch;
constexpr float kLog2e = 1.44269504088896340736f;

BackwardKernel backward_kernel(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::amx_bf16:
    case CpuIsa::avx512_bf16:
    case CpuIsa::avx512: return cpu_backward_kernel_avx512();
    case CpuIsa::avx2: return cpu_backward_kernel_avx2();
    default: return cpu_backward_kernel_portable();
  }
}

// Key ranges of one query tile (the same for every head of a batch entry).
struct TileRange {
  std::int64_t block_begin, block_end;  // key blocks seen by some row
  std::int64_t max_first, min_last;     // intersection of the rows' ranges
};

// The deterministic mode's gate: key block kb adds to a dq tile only after the tile's previous
// key block has (the blocks that see a tile are consecutive).
struct DqGate {
  std::atomic<std::int64_t>* next;
  std::int64_t kb;

  static void pass(void* arg, bool enter) {
    auto* gate = static_cast<DqGate*>(arg);
    if (!enter) {
      gate->next->store(gate->kb + 1, std::memory_order_release);
      return;
    }
    for (int spins = 0; gate->next->load(std::memory_order_acquire) != gate->kb; ++spins)
      if (spins > 64)
        std::this_thread::yield();  // the owner of the previous block may be descheduled
  }
};

class Backward {
 public:
  struct Item {  // one key block of one pair of the phase; cost = query tiles that see it
    std::int64_t local, kb, cost;
  };

  Backward(const AttnBackwardParams& p, int threads, CpuIsa isa)
      : p_(p),
        g_(p),
        kernel_(backward_kernel(isa)),
        f16c_(isa != CpuIsa::portable),
        q_group_(f32_bwd_group_rows(f32_kernel_lanes(isa))),
        threads_(resolve_threads(threads)) {
    const std::int64_t pairs = p.batch * p.heads_kv;
    const std::int64_t pair_bytes = std::max<std::int64_t>(1, g_.pair_floats * 4);
    pairs_per_phase_ = std::clamp<std::int64_t>(kConfig.pack_budget_bytes / pair_bytes, 1,
                                                std::max<std::int64_t>(pairs, 1));
    reserve_floats(buffers_.packed, static_cast<std::size_t>(pairs_per_phase_ * g_.pair_floats));
    first_.resize(static_cast<std::size_t>(pairs_per_phase_ * g_.q_tiles * kBlockQ));
    const auto tiles = static_cast<std::size_t>(pairs_per_phase_ * g_.group * g_.q_tiles);
    row_poison_.resize(tiles * static_cast<std::size_t>(kBlockQ));
    tile_poisoned_.resize(tiles);
    key_poison_.resize(static_cast<std::size_t>(pairs_per_phase_ * g_.k_blocks * 2));
    last_.resize(first_.size());
    ranges_.resize(static_cast<std::size_t>(pairs_per_phase_ * g_.q_tiles));
    if (p.deterministic) {
      next_kb_.reset(new std::atomic<std::int64_t>[static_cast<std::size_t>(
          std::max<std::int64_t>(1, pairs_per_phase_ * g_.group * g_.q_tiles))]);
    } else {
      if (buffers_.partial.size() < static_cast<std::size_t>(threads_))
        buffers_.partial.resize(static_cast<std::size_t>(threads_));
      touched_.resize(static_cast<std::size_t>(threads_));
    }
  }

  void run() {
    const std::int64_t pairs = p_.batch * p_.heads_kv;
#pragma omp parallel num_threads(threads_)
    {
      Scratch scratch(g_);
      for (std::int64_t phase = 0; phase < pairs; phase += pairs_per_phase_) {
        const std::int64_t count = std::min(pairs_per_phase_, pairs - phase);
        run_phase(phase, count, scratch);
      }
    }
  }

 private:
  std::int64_t batch_of(std::int64_t pair) const {
    return pair / p_.heads_kv;
  }
  float* pair_base(std::int64_t local) const {
    return buffers_.packed.data() + local * g_.pair_floats;
  }
  float* q_tile_base(std::int64_t local, std::int64_t member, std::int64_t tile) const {
    return pair_base(local) + (member * g_.q_tiles + tile) * g_.q_tile_floats;
  }
  float* k_block_base(std::int64_t local, std::int64_t kb) const {
    return pair_base(local) + g_.group * g_.q_tiles * g_.q_tile_floats + kb * g_.k_block_floats;
  }
  std::int64_t tile_rows(std::int64_t tile) const {
    return std::min(kBlockQ, p_.len_q - tile * kBlockQ);
  }

  // Called by every thread of the parallel region.
  void run_phase(std::int64_t phase, std::int64_t count, Scratch& s) {
    const std::int64_t q_items = count * g_.group * g_.q_tiles;
#pragma omp for schedule(static) nowait
    for (std::int64_t item = 0; item < count * g_.q_tiles; ++item)
      tile_ranges(phase, item / g_.q_tiles, item % g_.q_tiles);
#pragma omp for schedule(static) nowait
    for (std::int64_t item = 0; item < q_items; ++item)
      pack_q_tile(phase, item / (g_.group * g_.q_tiles), item / g_.q_tiles % g_.group,
                  item % g_.q_tiles, s);
#pragma omp for schedule(static)
    for (std::int64_t item = 0; item < count * g_.k_blocks; ++item)
      pack_k_block(phase, item / g_.k_blocks, item % g_.k_blocks, s);
      // Rows that see a poisoned key are poisoned too (needs every tile and block packed).
#pragma omp for schedule(static)
    for (std::int64_t item = 0; item < q_items; ++item)
      poison_rows_seeing_keys(phase, item / (g_.group * g_.q_tiles), item / g_.q_tiles % g_.group,
                              item % g_.q_tiles);

#pragma omp single
    {
      work_.clear();
      for (std::int64_t local = 0; local < count; ++local)
        for (std::int64_t kb = 0; kb < g_.k_blocks; ++kb) {
          std::int64_t cost = 0;
          for (std::int64_t t = 0; t < g_.q_tiles; ++t) cost += sees(local, t, kb) ? 1 : 0;
          work_.push_back({local, kb, cost});
        }
      // (Clamped at 0 so that g++ 13 sees a valid size for the touched_ memset below.)
      const auto tiles = static_cast<std::size_t>(std::max<std::int64_t>(q_items, 0));
      if (p_.deterministic) {
        // Items in (pair, key block) order; each dq tile takes its key blocks' contributions in
        // that order (next_kb_ gates the dq product), so dq's summation order is fixed.
        shared_dq_.assign(tiles * static_cast<std::size_t>(kBlockQ * g_.Dp), 0.0f);
        for (std::size_t t = 0; t < tiles; ++t) {
          const std::int64_t local = static_cast<std::int64_t>(t) / (g_.group * g_.q_tiles);
          const std::int64_t tile = static_cast<std::int64_t>(t) % g_.q_tiles;
          next_kb_[t].store(
              ranges_[static_cast<std::size_t>(local * g_.q_tiles + tile)].block_begin,
              std::memory_order_relaxed);
        }
        next_item_.store(0, std::memory_order_relaxed);
      } else {
        // Longest first, so that causal work balances between threads.
        std::stable_sort(work_.begin(), work_.end(),
                         [](const Item& a, const Item& b) { return a.cost > b.cost; });
        for (std::size_t t = 0; t < touched_.size(); ++t) {
          reserve_floats(buffers_.partial[t], tiles * static_cast<std::size_t>(kBlockQ * g_.Dp));
          touched_[t].assign(tiles, 0);
        }
      }
    }
    if (p_.deterministic) {
      // Items are handed out strictly in order: a thread waiting at a dq gate waits only for
      // key blocks already taken by running threads, so the waits always end.
      for (std::size_t w; (w = next_item_.fetch_add(1, std::memory_order_relaxed)) < work_.size();)
        key_block(phase, work_[w], s);
#pragma omp barrier
    } else {
#pragma omp for schedule(dynamic, 1)
      for (std::size_t w = 0; w < work_.size(); ++w) key_block(phase, work_[w], s);
    }

    // dq: the ordered shared accumulators, or the sum of the per-thread partials.
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t item = 0; item < q_items; ++item) {
      const std::int64_t local = item / (g_.group * g_.q_tiles);
      const std::int64_t member = item / g_.q_tiles % g_.group, tile = item % g_.q_tiles;
      if (p_.deterministic)
        store_dq(phase, local, member, tile, shared_dq_.data() + item * kBlockQ * g_.Dp, s);
      else
        reduce_dq_tile(phase, local, member, tile, s);
    }
  }

  bool sees(std::int64_t local, std::int64_t tile, std::int64_t kb) const {
    const TileRange& r = ranges_[static_cast<std::size_t>(local * g_.q_tiles + tile)];
    return kb >= r.block_begin && kb < r.block_end;
  }

  void tile_ranges(std::int64_t phase, std::int64_t local, std::int64_t tile) {
    const std::int64_t b = batch_of(phase + local);
    TileRange range{0, 0, 0, std::numeric_limits<std::int64_t>::max()};
    std::int64_t lo = std::numeric_limits<std::int64_t>::max(), hi = 0;
    std::int64_t* first = &first_[static_cast<std::size_t>((local * g_.q_tiles + tile) * kBlockQ)];
    std::int64_t* last = &last_[static_cast<std::size_t>((local * g_.q_tiles + tile) * kBlockQ)];
    for (std::int64_t r = 0; r < tile_rows(tile); ++r) {
      const KeyRange keys = visible_keys(p_, b, tile * kBlockQ + r);
      first[r] = keys.first;
      last[r] = keys.last;
      range.max_first = std::max(range.max_first, keys.first);
      range.min_last = std::min(range.min_last, keys.last);
      if (keys.first < keys.last) {
        lo = std::min(lo, keys.first);
        hi = std::max(hi, keys.last);
      }
    }
    if (hi > 0) {
      range.block_begin = lo / kBlockK;
      range.block_end = (hi + kBlockK - 1) / kBlockK;
    }
    ranges_[static_cast<std::size_t>(local * g_.q_tiles + tile)] = range;
  }

  void pack_q_tile(std::int64_t phase, std::int64_t local, std::int64_t member, std::int64_t tile,
                   Scratch& s) {
    const std::int64_t pair = phase + local, b = batch_of(pair);
    const std::int64_t h = pair % p_.heads_kv * g_.group + member;
    const QTile t = q_tile_at(g_, q_tile_base(local, member, tile));
    const std::int64_t D = g_.D, Dv = g_.Dv;
    float* buffer = s.rows.data();
    for (std::int64_t r = 0; r < kBlockQ; ++r) {
      const std::int64_t i = tile * kBlockQ + r;
      float* q_row = t.q_rows + r * g_.Dp;
      float* do_row = t.dout_rows + r * g_.Dvp;
      std::fill(q_row, q_row + g_.Dp, 0.0f);
      std::fill(do_row, do_row + g_.Dvp, 0.0f);
      t.lse_log2[r] = std::numeric_limits<float>::infinity();  // P = 0 on padding rows
      t.delta[r] = 0.0f;
      row_poison_[tile_index(local, member, tile) * kBlockQ + static_cast<std::size_t>(r)] = 0;
      if (r == 0) tile_poisoned_[tile_index(local, member, tile)] = 0;
      const bool fully_masked =
          i < p_.len_q && p_.lse[b * p_.lse_stride_b + h * p_.lse_stride_h + i * p_.lse_stride_l] ==
                              -std::numeric_limits<float>::infinity();
      if (fully_masked) {
        // No key sees it: packed as zeros with P = 0 (its q and dout may hold anything).
      } else if (i < p_.len_q && poisoned_input_row(b, h, i)) {
        // Packed as a fully masked row (P = 0); its gradients are set to NaN explicitly.
        mark_row_poisoned(local, member, tile, r);
      } else if (i < p_.len_q) {
        std::copy_n(
            row_as_f32(p_.q, p_.dtype, b * p_.q_stride_b + i * p_.q_stride_l + h * p_.q_stride_h, D,
                       buffer, f16c_),
            D, q_row);
        std::copy_n(row_as_f32(p_.dout, p_.dout_dtype,
                               b * p_.do_stride_b + i * p_.do_stride_l + h * p_.do_stride_h, Dv,
                               buffer, f16c_),
                    Dv, do_row);
        const float* out = row_as_f32(p_.out, p_.out_dtype,
                                      b * p_.o_stride_b + i * p_.o_stride_l + h * p_.o_stride_h, Dv,
                                      buffer, f16c_);
        float delta = 0.0f;
        for (std::int64_t d = 0; d < Dv; ++d) delta += do_row[d] * out[d];
        t.delta[r] = delta;
        const float lse = p_.lse[b * p_.lse_stride_b + h * p_.lse_stride_h + i * p_.lse_stride_l];
        if (lse != -std::numeric_limits<float>::infinity()) t.lse_log2[r] = lse * kLog2e;
      }
      // Groups of q_group_ rows, each transposed (tile_config.hpp: f32_bwd_group_rows).
      const std::int64_t group0 = r / q_group_ * q_group_, in_group = r % q_group_;
      float* q_t = t.q_t + group0 * D + in_group;
      float* dout_t = t.dout_t + group0 * Dv + in_group;
      for (std::int64_t d = 0; d < D; ++d) q_t[d * q_group_] = q_row[d];
      for (std::int64_t d = 0; d < Dv; ++d) dout_t[d * q_group_] = do_row[d];
    }
  }

  void pack_k_block(std::int64_t phase, std::int64_t local, std::int64_t kb, Scratch& s) {
    const std::int64_t pair = phase + local, b = batch_of(pair), kv = pair % p_.heads_kv;
    const KBlock k = k_block_at(g_, k_block_base(local, kb));
    const std::int64_t D = g_.D, Dv = g_.Dv;
    float* buffer = s.rows.data();
    for (std::int64_t c = 0; c < kBlockK; ++c) {
      const std::int64_t j = kb * kBlockK + c;
      float* k_row = k.k_rows + c * g_.Dp;
      std::fill(k_row, k_row + g_.Dp, 0.0f);
      const float* v_row = nullptr;
      if (c == 0) {
        std::uint64_t* poison =
            &key_poison_[static_cast<std::size_t>((local * g_.k_blocks + kb) * 2)];
        poison[0] = poison[1] = 0;
      }
      // Keys beyond the valid key length are masked for every row: never read. A key whose K or
      // V is not finite is packed as zeros and flagged.
      const bool packed = j < p_.key_length(b);
      if (packed &&
          (!row_is_finite(p_.k, p_.dtype,
                          b * p_.k_stride_b + j * p_.k_stride_l + kv * p_.k_stride_h, D) ||
           !row_is_finite(p_.v, p_.dtype,
                          b * p_.v_stride_b + j * p_.v_stride_l + kv * p_.v_stride_h, Dv))) {
        key_poison_[static_cast<std::size_t>((local * g_.k_blocks + kb) * 2 + c / 64)] |=
            std::uint64_t{1} << (c % 64);
      } else if (packed) {
        std::copy_n(
            row_as_f32(p_.k, p_.dtype, b * p_.k_stride_b + j * p_.k_stride_l + kv * p_.k_stride_h,
                       D, buffer, f16c_),
            D, k_row);
        v_row =
            row_as_f32(p_.v, p_.dtype, b * p_.v_stride_b + j * p_.v_stride_l + kv * p_.v_stride_h,
                       Dv, buffer + g_.max_width, f16c_);
      }
      for (std::int64_t d = 0; d < D; ++d) k.k_t[d * kBlockK + c] = k_row[d];
      for (std::int64_t d = 0; d < Dv; ++d) k.v_t[d * kBlockK + c] = v_row ? v_row[d] : 0.0f;
    }
  }

  // Whether query row i's inputs make it poisoned (docs/semantics.md, "Non-finite values"): a
  // row with a visible key (its lse is not -inf) whose q, dout or out is not finite, or whose
  // lse is NaN or +inf.
  bool poisoned_input_row(std::int64_t b, std::int64_t h, std::int64_t i) const {
    const float lse = p_.lse[b * p_.lse_stride_b + h * p_.lse_stride_h + i * p_.lse_stride_l];
    if (lse == -std::numeric_limits<float>::infinity()) return false;
    return !(lse < std::numeric_limits<float>::infinity()) ||
           !row_is_finite(p_.q, p_.dtype, b * p_.q_stride_b + i * p_.q_stride_l + h * p_.q_stride_h,
                          g_.D) ||
           !row_is_finite(p_.dout, p_.dout_dtype,
                          b * p_.do_stride_b + i * p_.do_stride_l + h * p_.do_stride_h, g_.Dv) ||
           !row_is_finite(p_.out, p_.out_dtype,
                          b * p_.o_stride_b + i * p_.o_stride_l + h * p_.o_stride_h, g_.Dv);
  }

  std::size_t tile_index(std::int64_t local, std::int64_t member, std::int64_t tile) const {
    return static_cast<std::size_t>((local * g_.group + member) * g_.q_tiles + tile);
  }

  // Packs row r of a query tile as a fully masked row (zeros, P = 0) and flags it.
  void mark_row_poisoned(std::int64_t local, std::int64_t member, std::int64_t tile,
                         std::int64_t r) {
    const std::size_t index = tile_index(local, member, tile);
    row_poison_[index * kBlockQ + static_cast<std::size_t>(r)] = 1;
    tile_poisoned_[index] = 1;
    const QTile t = q_tile_at(g_, q_tile_base(local, member, tile));
    std::fill(t.q_rows + r * g_.Dp, t.q_rows + (r + 1) * g_.Dp, 0.0f);
    std::fill(t.dout_rows + r * g_.Dvp, t.dout_rows + (r + 1) * g_.Dvp, 0.0f);
    const std::int64_t group0 = r / q_group_ * q_group_, in_group = r % q_group_;
    for (std::int64_t d = 0; d < g_.D; ++d) t.q_t[group0 * g_.D + in_group + d * q_group_] = 0.0f;
    for (std::int64_t d = 0; d < g_.Dv; ++d)
      t.dout_t[group0 * g_.Dv + in_group + d * q_group_] = 0.0f;
    t.lse_log2[r] = std::numeric_limits<float>::infinity();
    t.delta[r] = 0.0f;
  }

  const std::uint64_t* key_poison(std::int64_t local, std::int64_t kb) const {
    return &key_poison_[static_cast<std::size_t>((local * g_.k_blocks + kb) * 2)];
  }

  void poison_rows_seeing_keys(std::int64_t phase, std::int64_t local, std::int64_t member,
                               std::int64_t tile) {
    const std::int64_t pair = phase + local, b = batch_of(pair);
    const std::int64_t h = pair % p_.heads_kv * g_.group + member;
    const TileRange& range = ranges_[static_cast<std::size_t>(local * g_.q_tiles + tile)];
    const std::size_t index = tile_index(local, member, tile);
    for (std::int64_t kb = range.block_begin; kb < range.block_end; ++kb) {
      const std::uint64_t* words = key_poison(local, kb);
      for (int w = 0; w < 2; ++w)
        for (std::uint64_t bits = words[w]; bits != 0; bits &= bits - 1) {
          const std::int64_t j = kb * kBlockK + w * 64 + __builtin_ctzll(bits);
          for (std::int64_t r = 0; r < tile_rows(tile); ++r)
            if (row_poison_[index * kBlockQ + static_cast<std::size_t>(r)] == 0 &&
                key_visible(p_, b, h, tile * kBlockQ + r, j))
              mark_row_poisoned(local, member, tile, r);
        }
    }
  }

  // Flags in key_nan the keys of block kb that a poisoned row of the tile sees.
  void keys_seen_by_poisoned_rows(std::int64_t phase, std::int64_t local, std::int64_t member,
                                  std::int64_t tile, std::int64_t kb,
                                  std::vector<std::uint8_t>& key_nan) const {
    const std::size_t index = tile_index(local, member, tile);
    if (tile_poisoned_[index] == 0) return;
    const std::int64_t pair = phase + local, b = batch_of(pair);
    const std::int64_t h = pair % p_.heads_kv * g_.group + member;
    const std::int64_t keys = std::min(kBlockK, p_.len_k - kb * kBlockK);
    for (std::int64_t r = 0; r < tile_rows(tile); ++r) {
      if (row_poison_[index * kBlockQ + static_cast<std::size_t>(r)] == 0) continue;
      for (std::int64_t c = 0; c < keys; ++c)
        if (key_visible(p_, b, h, tile * kBlockQ + r, kb * kBlockK + c))
          key_nan[static_cast<std::size_t>(c)] = 1;
    }
  }

  BackwardStep make_step(std::int64_t phase, std::int64_t local, std::int64_t member,
                         std::int64_t tile, std::int64_t kb, Scratch& s) const {
    const std::int64_t pair = phase + local, b = batch_of(pair);
    const std::int64_t h = pair % p_.heads_kv * g_.group + member;
    const std::int64_t row0 = tile * kBlockQ;
    const QTile t = q_tile_at(g_, q_tile_base(local, member, tile));
    const KBlock k = k_block_at(g_, k_block_base(local, kb));
    const TileRange& range = ranges_[static_cast<std::size_t>(local * g_.q_tiles + tile)];
    BackwardStep step{};
    step.rows = tile_rows(tile);
    step.dim = g_.D, step.dim_v = g_.Dv, step.dim_padded = g_.Dp, step.dim_v_padded = g_.Dvp;
    step.q_group = q_group_;
    step.q_t = t.q_t, step.q_rows = t.q_rows, step.dout_t = t.dout_t;
    step.dout_rows = t.dout_rows, step.lse_log2 = t.lse_log2, step.delta = t.delta;
    step.k_t = k.k_t, step.k_rows = k.k_rows, step.v_t = k.v_t;
    step.key0 = kb * kBlockK;
    step.interior = step.key0 >= range.max_first && step.key0 + kBlockK <= range.min_last;

    TileJob& m = step.mods;
    m.rows = step.rows;
    const std::size_t rows_at = static_cast<std::size_t>((local * g_.q_tiles + tile) * kBlockQ);
    m.key_first = &first_[rows_at];
    m.key_last = &last_[rows_at];
    m.scale = p_.scale;
    m.scale_log2 = p_.scale * kLog2e;
    m.softcap = p_.softcap;
    m.alibi_slope = p_.alibi_slope(b, h);
    m.alibi_pos0 = row0 + p_.key_length(b) - p_.len_q;
    if (p_.mask != nullptr) {
      const std::int64_t offset =
          b * p_.mask_stride_b + h * p_.mask_stride_h + row0 * p_.mask_stride_q;
      if (p_.mask_dtype == DType::boolean)
        m.bool_mask = static_cast<const std::uint8_t*>(p_.mask) + offset;
      else
        m.additive_mask = static_cast<const float*>(p_.mask) + offset;
      m.mask_stride_q = p_.mask_stride_q;
      m.mask_stride_k = p_.mask_stride_k;
    }
    if (p_.has_dropout()) {
      m.dropout = &p_.dropout;
      m.batch = b, m.head = h, m.row0 = row0;
    }
    step.probs = s.probs.data();
    step.dprobs = s.dprobs.data();
    step.dropped = s.dropped.data();
    step.softcap_grad = s.softcap_grad.data();
    return step;
  }

  // scale * acc rows, converted into a strided tensor.
  void store_rows(void* base, DType dtype, std::int64_t offset0, std::int64_t row_stride,
                  std::int64_t rows, std::int64_t cols, const float* acc, std::int64_t ld,
                  float scale, Scratch& s) const {
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) s.out_row[c] = scale * acc[r * ld + c];
      store_row(base, dtype, offset0 + r * row_stride, cols, s.out_row.data(), f16c_);
    }
  }

  // One key block of one pair against every query tile that sees it: dk and dv of the block,
  // and its dq contributions (into this thread's partial buffer, or, deterministic, into the
  // tile's shared buffer in key-block order).
  void key_block(std::int64_t phase, const Item& item, Scratch& s);

  void reduce_dq_tile(std::int64_t phase, std::int64_t local, std::int64_t member,
                      std::int64_t tile, Scratch& s) const {
    const std::size_t index =
        static_cast<std::size_t>((local * g_.group + member) * g_.q_tiles + tile);
    const std::size_t floats = static_cast<std::size_t>(kBlockQ * g_.Dp);
    std::fill(s.dq.begin(), s.dq.end(), 0.0f);
    for (std::size_t t = 0; t < touched_.size(); ++t) {  // thread order
      if (touched_[t][index] == 0) continue;
      const float* src = buffers_.partial[t].data() + index * floats;
      for (std::size_t n = 0; n < floats; ++n) s.dq[n] += src[n];
    }
    store_dq(phase, local, member, tile, s.dq.data(), s);
  }

  void store_dq(std::int64_t phase, std::int64_t local, std::int64_t member, std::int64_t tile,
                const float* acc, Scratch& s) const {
    const std::int64_t pair = phase + local, b = batch_of(pair);
    const std::int64_t h = pair % p_.heads_kv * g_.group + member;
    const std::int64_t offset0 =
        b * p_.dq_stride_b + tile * kBlockQ * p_.dq_stride_l + h * p_.dq_stride_h;
    store_rows(p_.dq, p_.dq_dtype, offset0, p_.dq_stride_l, tile_rows(tile), g_.D, acc, g_.Dp,
               p_.scale, s);
    const std::size_t index = tile_index(local, member, tile);
    if (tile_poisoned_[index] == 0) return;
    std::fill(s.out_row.begin(), s.out_row.end(), std::numeric_limits<float>::quiet_NaN());
    for (std::int64_t r = 0; r < tile_rows(tile); ++r)
      if (row_poison_[index * kBlockQ + static_cast<std::size_t>(r)] != 0)
        store_row(p_.dq, p_.dq_dtype, offset0 + r * p_.dq_stride_l, g_.D, s.out_row.data(), f16c_);
  }

  const AttnBackwardParams& p_;
  const Layout g_;
  const BackwardKernel kernel_;
  const bool f16c_;
  const std::int64_t q_group_;  // rows per group of the transposed Q / dO tiles
  const int threads_;
  std::int64_t pairs_per_phase_ = 1;
  BackwardBuffers& buffers_ = backward_buffers();  // the packed pairs, the dq partials
  std::vector<std::int64_t> first_, last_;         // per packed query row: its visible keys
  std::vector<TileRange> ranges_;                  // per (pair, query tile)
  // Poisoned rows (per packed query row and, summarised, per query tile) and keys (two words
  // per key block) of the phase: docs/semantics.md, "Non-finite values".
  std::vector<std::uint8_t> row_poison_, tile_poisoned_;
  std::vector<std::uint64_t> key_poison_;
  std::vector<Item> work_;
  // Deterministic mode: dq of every query tile of the phase, and per tile the key block whose
  // contribution is due next; items are handed out by next_item_.
  AlignedVector<float> shared_dq_;
  std::unique_ptr<std::atomic<std::int64_t>[]> next_kb_;
  std::atomic<std::size_t> next_item_{0};
  // Otherwise: per thread, whether it has written (and so zeroed) each query tile's dq partial
  // (buffers_.partial) in this phase.
  std::vector<std::vector<std::uint8_t>> touched_;
};

void Backward::key_block(std::int64_t phase, const Item& item, Scratch& s) {
  std::fill(s.dk.begin(), s.dk.end(), 0.0f);
  std::fill(s.dv.begin(), s.dv.end(), 0.0f);
  const auto thread = static_cast<std::size_t>(thread_index());
  for (std::int64_t member = 0; member < g_.group; ++member)
    for (std::int64_t tile = 0; tile < g_.q_tiles; ++tile) {
      if (!sees(item.local, tile, item.kb)) continue;
      BackwardStep step = make_step(phase, item.local, member, tile, item.kb, s);
      step.dk = s.dk.data();
      step.dv = s.dv.data();
      const std::size_t index =
          static_cast<std::size_t>((item.local * g_.group + member) * g_.q_tiles + tile);
      const std::size_t floats = static_cast<std::size_t>(kBlockQ * g_.Dp);
      DqGate gate{nullptr, item.kb};
      if (p_.deterministic) {
        gate.next = &next_kb_[index];
        step.dq = shared_dq_.data() + index * floats;
        step.dq_gate = &DqGate::pass;
        step.dq_gate_arg = &gate;
      } else {
        float* dq = buffers_.partial[thread].data() + index * floats;
        if (touched_[thread][index] == 0) {
          std::fill(dq, dq + floats, 0.0f);
          touched_[thread][index] = 1;
        }
        step.dq = dq;
      }
      kernel_(step);
    }
  const std::int64_t pair = phase + item.local, b = batch_of(pair), kv = pair % p_.heads_kv;
  const std::int64_t key0 = item.kb * kBlockK;
  const std::int64_t keys = std::min(kBlockK, p_.len_k - key0);
  // dk and dv of the keys that a poisoned row sees are NaN.
  s.key_nan.assign(static_cast<std::size_t>(kBlockK), 0);
  for (std::int64_t member = 0; member < g_.group; ++member)
    for (std::int64_t tile = 0; tile < g_.q_tiles; ++tile)
      if (sees(item.local, tile, item.kb))
        keys_seen_by_poisoned_rows(phase, item.local, member, tile, item.kb, s.key_nan);
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  for (std::int64_t c = 0; c < keys; ++c)
    if (s.key_nan[static_cast<std::size_t>(c)] != 0) {
      std::fill(s.dk.begin() + c * g_.Dp, s.dk.begin() + (c + 1) * g_.Dp, kNaN);
      std::fill(s.dv.begin() + c * g_.Dvp, s.dv.begin() + (c + 1) * g_.Dvp, kNaN);
    }
  store_rows(p_.dk, p_.dk_dtype, b * p_.dk_stride_b + key0 * p_.dk_stride_l + kv * p_.dk_stride_h,
             p_.dk_stride_l, keys, g_.D, s.dk.data(), g_.Dp, p_.scale, s);
  store_rows(p_.dv, p_.dv_dtype, b * p_.dv_stride_b + key0 * p_.dv_stride_l + kv * p_.dv_stride_h,
             p_.dv_stride_l, keys, g_.Dv, s.dv.data(), g_.Dvp, 1.0f, s);
}

}  // namespace

void cpu_flash_backward(const AttnBackwardParams& p, int threads, CpuIsa isa_cap) {
  Backward(p, threads, select_cpu_isa(isa_cap)).run();
}

}  // namespace tileattn::detail
