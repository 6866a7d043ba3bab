// The CPU flash backward's buffers (flash_backward.cpp): the packed layout of a (batch, kv
// head) pair's query tiles and key blocks, each thread's scratch for one key block, and the
// large buffers a calling thread keeps for later calls.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/params.hpp"
#include "cpu/aligned_buffer.hpp"
#include "cpu/tile_config.hpp"

namespace tileattn::detail::cpu_backward {

inline constexpr CpuBackwardConfig kConfig = cpu_backward_config();
inline constexpr std::int64_t kBlockQ = kConfig.block_q, kBlockK = kConfig.block_k;

// Sizes (in floats) and offsets of the packed buffers.
struct Layout {
  std::int64_t D, Dv, Dp, Dvp, q_tiles, k_blocks, group;
  std::int64_t q_tile_floats, k_block_floats;
  std::int64_t pair_floats;  // every query tile of the group plus every key block
  std::int64_t max_width;    // max(D, Dv)

  explicit Layout(const AttnParams& p)
      : D(p.dim),
        Dv(p.dim_v),
        Dp(round_up(p.dim, kConfig.d_align)),
        Dvp(round_up(p.dim_v, kConfig.d_align)),
        q_tiles((p.len_q + kBlockQ - 1) / kBlockQ),
        k_blocks((p.len_k + kBlockK - 1) / kBlockK),
        group(p.heads_per_kv) {
    q_tile_floats = kBlockQ * (D + Dp + Dv + Dvp + 2);
    k_block_floats = kBlockK * (D + Dp + Dv);
    pair_floats = group * q_tiles * q_tile_floats + k_blocks * k_block_floats;
    max_width = std::max(D, Dv);
  }
};

struct QTile {
  float *q_t, *q_rows, *dout_t, *dout_rows, *lse_log2, *delta;
};
inline QTile q_tile_at(const Layout& g, float* base) {
  QTile t;
  t.q_t = base;                                // [block_q / group][D][group]
  t.q_rows = t.q_t + g.D * kBlockQ;            // [block_q][Dp]
  t.dout_t = t.q_rows + kBlockQ * g.Dp;        // [block_q / group][Dv][group]
  t.dout_rows = t.dout_t + g.Dv * kBlockQ;     // [block_q][Dvp]
  t.lse_log2 = t.dout_rows + kBlockQ * g.Dvp;  // [block_q]
  t.delta = t.lse_log2 + kBlockQ;              // [block_q]
  return t;
}

struct KBlock {
  float *k_t, *k_rows, *v_t;
};
inline KBlock k_block_at(const Layout& g, float* base) {
  KBlock b;
  b.k_t = base;                       // [D][block_k]
  b.k_rows = b.k_t + g.D * kBlockK;   // [block_k][Dp]
  b.v_t = b.k_rows + kBlockK * g.Dp;  // [Dv][block_k]
  return b;
}

struct Scratch {
  AlignedVector<float> probs, dprobs, dropped, softcap_grad, dk, dv, dq, rows, out_row;
  std::vector<const float*> row_ptrs;
  std::vector<std::uint8_t> key_nan;  // per key of a block: its dk and dv are NaN
  explicit Scratch(const Layout& g) {
    const auto n = [](std::int64_t x) { return static_cast<std::size_t>(x); };
    for (auto* v : {&probs, &dprobs, &dropped, &softcap_grad})
      v->assign(n(kBlockQ * kBlockK), 0.0f);
    dk.resize(n(kBlockK * g.Dp));
    dv.resize(n(kBlockK * g.Dvp));
    dq.resize(n(kBlockQ * g.Dp));
    rows.resize(n(3 * g.max_width));
    out_row.resize(n(std::max(g.Dp, g.Dvp)));
  }
};

// The backward's large buffers, kept per calling thread and reused by later calls (as the
// forward keeps its packed phase buffer): allocated fresh, every call paid for zeroing them
// and for a page fault per 4 KiB page (the packed pairs are up to pack_budget_bytes plus one
// pair). They grow to the largest call's sizes and are freed when the thread exits. The
// packing writes every element that the kernels read, and a dq partial tile is zeroed when a
// thread first writes it in a phase, so stale contents are never read.
struct BackwardBuffers {
  AlignedVector<float> packed;
  std::vector<AlignedVector<float>> partial;  // per thread of the call's team: dq partials
};
inline BackwardBuffers& backward_buffers() {
  thread_local BackwardBuffers buffers;
  return buffers;
}

// Makes `v` hold at least n elements, reallocating (not copying) only to grow.
inline void reserve_floats(AlignedVector<float>& v, std::size_t n) {
  if (v.size() >= n) return;
  v.clear();
  v.shrink_to_fit();
  v.resize(n);
}

}  // namespace tileattn::detail::cpu_backward
