// The sm90 forward's consumer warpgroups. They take the registers (setmaxnreg.inc) and, per tile
// the producer hands over (flash_fwd_sm90_scheduler.cuh), wait for their 64 rows of Q, run the
// tile's key blocks (the first block, then Sm90FwdMainloop::step per block, then ::finish) and
// the epilogue (flash_fwd_sm90_epilogue.cuh). The state a tile carries from block to block lives
// here: the output accumulator, the rows' running maxima and sums (Sm90OnlineSoftmax), the score
// policy's per-row values (flash_fwd_sm90_scores.cuh).
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/sm90/async.cuh"
#include "cuda/sm90/flash_fwd_sm90_epilogue.cuh"
#include "cuda/sm90/flash_fwd_sm90_mainloop.cuh"
#include "cuda/sm90/flash_fwd_sm90_scheduler.cuh"
#include "cuda/sm90/flash_fwd_sm90_scores.cuh"
#include "cuda/sm90/flash_fwd_sm90_smem.cuh"
#include "cuda/sm90/flash_fwd_sm90_softmax.cuh"
#include "cuda/sm90/flash_fwd_sm90_trace.cuh"
#include "cuda/sm90/flash_fwd_sm90_traits.cuh"

namespace tileattn::cuda {

// q_tiles: the shared memory's aligned base, o_stage: the output staging buffer (Sm90FwdSmem);
// warp_group: 1 .. consumer_warp_groups.
template <class K>
__device__ __forceinline__ void run_sm90_fwd_consumer(const Sm90FwdParams& params,
                                                      typename K::Element* const q_tiles,
                                                      typename K::Element* const o_stage,
                                                      const int warp_group) {
  using T = typename K::Element;
  using Smem = Sm90FwdSmem<K>;
  constexpr int kStages = K::kStages, kQStages = K::kQStages, kBlockN = K::kBlockN;
  const FlashFwdParams& p = params.base;
  T* const k_tiles = q_tiles + Smem::kQElements;
  T* const v_tiles = k_tiles + Smem::kKvElements;
  auto& bars = *reinterpret_cast<Sm90Barriers<kStages>*>(reinterpret_cast<char*>(q_tiles) +
                                                         Smem::kBarsOffset);
  setmaxnreg_inc<K::cfg.consumer_registers>();
  const int consumer = warp_group - 1;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp_in_group = (static_cast<int>(threadIdx.x) / 32) % 4;
  const int g = lane / 4, t = lane % 4;
  const T* q_group = q_tiles + consumer * 64 * 64;  // this warpgroup's rows of the current Q
  const Sm90PingPong<K> turn(params, consumer);
  typename K::OFragment acc_o;
  const std::uint64_t q_desc0 = sw128_desc(q_group, 16, 1024);
  const std::uint32_t k_ring_lo = sw128_desc_lo(k_tiles, 16);
  const std::uint32_t v_ring_lo = sw128_desc_lo(v_tiles, kBlockN * 128);
  Sm90FwdMainloop<K> mainloop{q_group, q_desc0, k_ring_lo, v_ring_lo};
  Sm90FwdTrace trace(consumer, warp_in_group, lane);
  const float speculation_limit = exp2f(params.rescale_threshold);  // see Sm90OnlineSoftmax
  float max_guess[2] = {-INFINITY, -INFINITY};  // (speculating kernels, see Sm90OnlineSoftmax)
  int kv_it = 0;  // the ring position of the tile's first key block, as the producer's
  for (int q_pass = 0;; ++q_pass) {
    trace.tile(q_pass, 0);
    // The tile's index and work from the producer (Sm90TileHandOver).
    named_barrier_sync(K::kTileFullBarrier + consumer, K::kTileFullThreads);
    const int tile_index = bars.hand_over.tile[q_pass & 1];
    if (tile_index < 0) break;
    const Sm90TileWork w = bars.hand_over.work[q_pass & 1];
    trace.start_tile(q_pass, w.n_blocks);
    trace.tile(q_pass, 1);
    named_barrier_arrive(K::kTileEmptyBarrier, K::kTileEmptyThreads);
    const int q_slot = q_pass % kQStages;
    mbarrier_wait(&bars.q_full[q_slot][consumer], (q_pass / kQStages) & 1);
    trace.tile(q_pass, 2);
    if constexpr (kQStages > 1)
      mainloop.q_group = q_tiles + q_slot * K::kBlockM * K::kDim + consumer * 64 * 64;
    if (w.n_blocks == 0) release_slot(&bars.q_empty[q_slot][consumer], lane);
    const TileCoords& tile = w.coords;
    const int h = tile.h, b = tile.b;
    const int warp_row0 = tile.m0 + consumer * 64 + warp_in_group * 16;
    const int row0 = warp_row0 + g;  // rows row0, row0 + 8
    // The epilogue's rows in the tensors: a varlen sequence's rows start at q0.
    const int out_row0 = tile.q0 + warp_row0, out_row_end = tile.q0 + tile.len_q;
    if constexpr (K::kRereadCoords)
      Sm90FwdEpilogue<K>::publish_rows(bars.out_coords[consumer * 4 + warp_in_group], lane, b, h,
                                       out_row0, out_row_end);

#pragma unroll
    for (int dt = 0; dt < K::kDTiles; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[dt][e] = 0.0f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};  // base-2 units
    [[maybe_unused]] bool speculate_ok = false;
    Sm90OnlineSoftmax<K> softmax(params, speculation_limit, max_guess, row_max, row_sum,
                                 speculate_ok);
    const typename K::ScorePolicy scores(p, w, row0, t);

    // Whether this warpgroup's rows see no key of the tile's last block (K::kSkipLast): the
    // visible keys' end grows with the row, so the warpgroup's last row bounds all of them.
    // n_wg: the key blocks this warpgroup computes.
    bool last_skip = false;
    if constexpr (K::kSkipLast) {
      if (w.n_blocks > 0) {
        int first, last;
        tile.visible(tile.m0 + min(consumer * 64 + 63, tile.rows_in_block - 1), first, last);
        last_skip = last <= (w.n_block_begin + w.n_blocks - 1) * kBlockN;
      }
    }
    const int n_wg = w.n_blocks - (last_skip ? 1 : 0);

    // The epilogue's row values (1 / l, logsumexp), and whether its staging buffer's first wait
    // is done: where the configuration says so, in Sm90FwdMainloop::finish.
    float inv_sum[2] = {0.0f, 0.0f}, row_lse[2] = {-INFINITY, -INFINITY};
    bool stage_free = false;

    if (n_wg > 0) {
      typename K::SFragment s;
      // P buffers. Speculating kernels keep the scores (a block may be redone from them) and
      // pack P during the softmax into the buffer that P_{j-1} V_{j-1}, still running, does
      // not read: two buffers, and the loop unrolled by two so that each is named statically
      // (ptxas coalesces a copy of one into the other, and then serialises the wgmmas).
      // The others overwrite the scores and pack P into one buffer once P_{j-1} V_{j-1} is done.
      typename K::POperand pa0;
      [[maybe_unused]] typename K::POperand pa1;  // speculating kernels only
      float rescale[2];
      {  // the tile's first block: S_0 and its softmax
        const int slot = kv_it % kStages;
        trace.block(0, 0);
        if (turn.first_turn) turn.take();
        trace.block(0, 1);
        mbarrier_wait(&bars.k_full[slot], (kv_it / kStages) & 1);
        trace.block(0, 2);
        mainloop.issue_qk(s, slot);
        trace.block(0, 3);
        if (turn.first_turn) turn.pass();
        trace.block(0, 4);
        wgmma_wait<0>();
        fence_operand(s);
        trace.block(0, 5);
        release_slot(&bars.k_empty[slot], lane);
        if (kQStages == 1 && n_wg == 1) release_slot(&bars.q_empty[q_slot][consumer], lane);
        scores.template to_probabilities<K, true>(params, softmax, s, pa0, w.n_block_begin,
                                                  w.n_block_begin * kBlockN + 2 * t, rescale);
        trace.block(0, 6);
        trace.block(0, 7);
        if constexpr (!K::kSpeculate) mainloop.to_operand(s, pa0);
      }
      if constexpr (K::kSpeculate) {
        for (int i = 1;; i += 2) {
          if (i >= n_wg) {
            mainloop.finish(params, bars, turn, consumer, lane, acc_o, pa0, rescale, kv_it, n_wg,
                            q_slot, softmax, inv_sum, row_lse, stage_free);
            break;
          }
          mainloop.step(params, bars, turn, consumer, lane, t, acc_o, s, pa0, pa1, rescale, softmax,
                        scores, w, kv_it, i, n_wg, q_slot, trace);
          if (i + 1 >= n_wg) {
            mainloop.finish(params, bars, turn, consumer, lane, acc_o, pa1, rescale, kv_it, n_wg,
                            q_slot, softmax, inv_sum, row_lse, stage_free);
            break;
          }
          mainloop.step(params, bars, turn, consumer, lane, t, acc_o, s, pa1, pa0, rescale, softmax,
                        scores, w, kv_it, i + 1, n_wg, q_slot, trace);
        }
      } else {
        for (int i = 1; i < n_wg; ++i)
          mainloop.step(params, bars, turn, consumer, lane, t, acc_o, s, pa0, pa0, rescale, softmax,
                        scores, w, kv_it, i, n_wg, q_slot, trace);
        mainloop.finish(params, bars, turn, consumer, lane, acc_o, pa0, rescale, kv_it, n_wg,
                        q_slot, softmax, inv_sum, row_lse, stage_free);
      }
      kv_it += w.n_blocks;
      if constexpr (K::kSpeculate) softmax.keep_guess(max_guess);
    }
    if (last_skip) {
      // The skipped block: the turns the other warpgroup takes beyond this one's, and its K
      // and V slots, released once loaded (so that each release counts towards this use of the
      // slot).
      if (n_wg == 0) kv_it += w.n_blocks;
      const int it = kv_it - 1, slot = it % kStages;
      for (int n = turn.turns(w.n_blocks) - turn.turns(n_wg); n > 0; --n) {
        turn.take();
        turn.pass();
      }
      mbarrier_wait(&bars.k_full[slot], (it / kStages) & 1);
      release_slot(&bars.k_empty[slot], lane);
      mbarrier_wait(&bars.v_full[slot], (it / kStages) & 1);
      release_slot(&bars.v_empty[slot], lane);
      if (n_wg == 0) release_slot(&bars.q_empty[q_slot][consumer], lane);
    }
    trace.tile(q_pass, 3);
    trace.end_tile(q_pass, w.n_blocks);

    Sm90FwdEpilogue<K>::store(params, o_stage, acc_o, softmax, inv_sum, row_lse, stage_free,
                              consumer * 4 + warp_in_group, lane, b, h, out_row0, out_row_end,
                              trace, q_pass);
    trace.tile(q_pass, 4);
  }
  Sm90FwdEpilogue<K>::drain(params);
}

}  // namespace tileattn::cuda
