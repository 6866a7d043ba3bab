// The sm90 forward's consumer main loop: the key blocks of one tile, per consumer warpgroup.
// Per key block j a warpgroup issues
//     S_j = Q K_j^T            wgmma m64n{block_n}k16, Q and K from shared memory
//     O  += P_{j-1} V_{j-1}    wgmma m64n{D}k16, P from registers, V MN-major
// back to back (O rescaled between the two issues), then waits for S_j only (wait_group 1) and
// runs the online softmax of block j while P_{j-1} V_{j-1} is still on the tensor cores
// (FlashAttention-3's intra-warpgroup overlap). The warpgroups take turns to issue
// (Sm90PingPong), so one's softmax overlaps another's GEMMs. The consumer's tile loop
// (flash_fwd_sm90_consumer.cuh) runs a tile's first block, then step() per further block, then
// finish() (the last block's P V).
//
// Order inside one iteration (as FlashAttention-3): the O rescale and the P conversion are
// placed where no in-flight wgmma reads their registers (ptxas would otherwise serialise the
// wgmma pipeline, warning C7513).
#pragma once

#include <cstdint>

#include "cuda/common/elements.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/sm90/async.cuh"
#include "cuda/sm90/flash_fwd_sm90_scheduler.cuh"
#include "cuda/sm90/flash_fwd_sm90_smem.cuh"
#include "cuda/sm90/flash_fwd_sm90_softmax.cuh"
#include "cuda/sm90/flash_fwd_sm90_trace.cuh"
#include "cuda/sm90/flash_fwd_sm90_traits.cuh"
#include "cuda/sm90/wgmma.cuh"

namespace tileattn::cuda {

// One arrival per warp; __syncwarp first so that every lane's reads of the slot happen before
// the arrival that lets the producer overwrite it.
__device__ __forceinline__ void release_slot(std::uint64_t* bar, int lane) {
  __syncwarp();
  if (lane == 0) mbarrier_arrive(bar);
}

// Ping-pong: a warpgroup issues its GEMMs only in its turn and then hands the turn to the next
// one (round robin), so one warpgroup's softmax runs while another's GEMMs occupy the tensor
// cores. A tile's first S and its last P V take a turn unless the configuration says otherwise
// (Sm90TileConfig::first_turn, finish_turn: dropping them keeps a warpgroup's tile end from
// holding back the other warpgroup's, but gains nothing measurable). Both warpgroups of a tile
// take the same number of turns: turns(n) for n key blocks.
template <class K>
struct Sm90PingPong {
  const int consumer;
  const bool ping_pong;
  bool first_turn, finish_turn;

  __device__ __forceinline__ Sm90PingPong(const Sm90FwdParams& params, int consumer_)
      : consumer(consumer_), ping_pong(params.ping_pong) {
    if (consumer == K::kConsumerGroups - 1) pass();  // warpgroup 0 goes first
    first_turn = params.first_turn;
    finish_turn = params.finish_turn;
  }
  __device__ __forceinline__ void take() const {
    if (ping_pong) named_barrier_sync(kTurnBarrier + consumer, 256);
  }
  __device__ __forceinline__ void pass() const {
    if (ping_pong) named_barrier_arrive(kTurnBarrier + (consumer + 1) % K::kConsumerGroups, 256);
  }
  __device__ __forceinline__ int turns(int n) const {
    return n > 0 ? n - 1 + (first_turn ? 1 : 0) + (finish_turn ? 1 : 0) : 0;
  }
};

// A consumer warpgroup's GEMM issue: its Q rows and the wgmma descriptors of Q, K and V.
template <class K>
struct Sm90FwdMainloop {
  using T = typename K::Element;
  using Scores = typename K::ScorePolicy;
  using SFragment = typename K::SFragment;
  using OFragment = typename K::OFragment;
  using POperand = typename K::POperand;
  using Barriers = Sm90Barriers<K::kStages>;
  static constexpr int kStages = K::kStages, kBlockN = K::kBlockN, kDim = K::kDim;

  const T* q_group;  // this warpgroup's rows of the current Q
  // Q's descriptor at the first k-step (K::kOpaqueQDesc); K and V descriptors: the ring's low
  // word (sw128_desc_lo) plus the slot's and the k-step's byte offsets, one 32-bit add each.
  const std::uint64_t q_desc0;
  const std::uint32_t k_ring_lo, v_ring_lo;

  // S = Q K^T of the K tile in ring slot `slot`.
  __device__ __forceinline__ void issue_qk(SFragment& s, int slot) const {
    const std::uint32_t k_lo = k_ring_lo + ((slot * K::kKvTileBytes) >> 4);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kDim / 16; ++ks) {
      const int col_block = ks / 4, in_row = (ks % 4) * 16;       // elements
      const int q_offset = col_block * K::kBlockM * 64 + in_row;  // elements
      const std::uint64_t q_desc =
          K::kOpaqueQDesc ? desc_add_volatile(q_desc0, q_offset * static_cast<int>(sizeof(T)) / 16)
                          : sw128_desc(q_group + q_offset, 16, 1024);
      wgmma_ss<T, kBlockN>(
          s, q_desc, sw128_desc_at(k_lo, (col_block * kBlockN * 64 + in_row) * sizeof(T), 1024),
          ks > 0);
    }
    wgmma_commit();
  }

  // acc_o += P V of the V tile in ring slot `slot`.
  __device__ __forceinline__ void issue_pv(OFragment& acc_o, const POperand& pa, int slot) const {
    const std::uint32_t v_lo = v_ring_lo + ((slot * K::kKvTileBytes) >> 4);
    fence_operand(acc_o);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kBlockN / 16; ++ks)
      wgmma_rs<T, kDim>(acc_o, pa[ks], sw128_desc_at(v_lo, ks * 16 * 64 * sizeof(T), 1024));
    wgmma_commit();
  }

  __device__ __forceinline__ static void rescale_o(OFragment& acc_o, const float (&rescale)[2]) {
    if (!__any_sync(0xffffffffu, rescale[0] != 1.0f || rescale[1] != 1.0f)) return;
#pragma unroll
    for (int dt = 0; dt < K::kDTiles; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[dt][e] *= rescale[e >> 1];
  }

  // P as wgmma A fragments: the C fragments of n8 tiles 2k and 2k+1 form k16 step k.
  __device__ __forceinline__ static void to_operand(const SFragment& s, POperand& pa) {
#pragma unroll
    for (int ks = 0; ks < kBlockN / 16; ++ks) {
      pa[ks][0] = MmaType<T>::pack(s[2 * ks][0], s[2 * ks][1]);
      pa[ks][1] = MmaType<T>::pack(s[2 * ks][2], s[2 * ks][3]);
      pa[ks][2] = MmaType<T>::pack(s[2 * ks + 1][0], s[2 * ks + 1][1]);
      pa[ks][3] = MmaType<T>::pack(s[2 * ks + 1][2], s[2 * ks + 1][3]);
    }
  }

  // Key block i of the tile (i >= 1, ring position kv_it + i): S_i, the previous block's P V,
  // the softmax of S_i. P_{i-1} is in pa_prev; P_i goes to pa_next (the same buffer unless
  // speculating). consumer, lane, t: the thread's warpgroup, lane and lane % 4.
  __device__ __forceinline__ void step(const Sm90FwdParams& params, Barriers& bars,
                                       const Sm90PingPong<K>& turn, int consumer, int lane, int t,
                                       OFragment& acc_o, SFragment& s, POperand& pa_prev,
                                       POperand& pa_next, float (&rescale)[2],
                                       Sm90OnlineSoftmax<K>& softmax, const Scores& scores,
                                       const Sm90TileWork& w, int kv_it, int i, int n_wg,
                                       int q_slot, const Sm90FwdTrace& trace) const {
    const int it = kv_it + i, slot = it % kStages, prev = (it - 1) % kStages;
    trace.block(i, 0);
    turn.take();
    trace.block(i, 1);
    mbarrier_wait(&bars.k_full[slot], (it / kStages) & 1);
    trace.block(i, 2);
    issue_qk(s, slot);
    trace.block(i, 3);
    rescale_o(acc_o, rescale);
    mbarrier_wait(&bars.v_full[prev], ((it - 1) / kStages) & 1);
    issue_pv(acc_o, pa_prev, prev);
    turn.pass();
    trace.block(i, 4);
    wgmma_wait<1>();  // S_j is ready; P_{j-1} V_{j-1} may still run
    fence_operand(s);
    trace.block(i, 5);
    release_slot(&bars.k_empty[slot], lane);
    if (K::kQStages == 1 && i == n_wg - 1) release_slot(&bars.q_empty[q_slot][consumer], lane);
    scores.template to_probabilities<K, false>(params, softmax, s, pa_next, w.n_block_begin + i,
                                               (w.n_block_begin + i) * kBlockN + 2 * t, rescale);
    trace.block(i, 6);
    wgmma_wait<0>();
    fence_operand(acc_o);
    trace.block(i, 7);
    release_slot(&bars.v_empty[prev], lane);
    if constexpr (!K::kSpeculate) to_operand(s, pa_next);
  }

  // The last block's P V (n_wg blocks from ring position kv_it), and beside it the epilogue's
  // row values and first wait for the staging buffer where the configuration says so
  // (Sm90FwdEpilogue: early rows).
  __device__ __forceinline__ void finish(const Sm90FwdParams& params, Barriers& bars,
                                         const Sm90PingPong<K>& turn, int consumer, int lane,
                                         OFragment& acc_o, const POperand& pa_last,
                                         float (&rescale)[2], int kv_it, int n_wg, int q_slot,
                                         Sm90OnlineSoftmax<K>& softmax, float (&inv_sum)[2],
                                         float (&row_lse)[2], bool& stage_free) const {
    // With two Q buffers the warpgroup frees its Q here, after its last S, rather than by a
    // test in every block (the producer needs the buffer only for the tile after next).
    if constexpr (K::kQStages > 1) release_slot(&bars.q_empty[q_slot][consumer], lane);
    const int it = kv_it + n_wg - 1, last = it % kStages;
    rescale_o(acc_o, rescale);
    if (turn.finish_turn) turn.take();
    mbarrier_wait(&bars.v_full[last], (it / kStages) & 1);
    issue_pv(acc_o, pa_last, last);
    if (turn.finish_turn) turn.pass();
    if constexpr (K::kEarlyRows) {
      softmax.row_values(inv_sum, row_lse);
      if constexpr (K::kStagedOutput) {
        if (params.base.vector_stores) {
          // (Sm90FwdEpilogue::wait_stage_free)
          if (params.o_tma && thread_index_now() % 128 == 0) bulk_wait_all<true>();
          named_barrier_sync(K::kStageBarrier + consumer, 128);
          stage_free = true;
        }
      }
    }
    wgmma_wait<0>();
    fence_operand(acc_o);
    release_slot(&bars.v_empty[last], lane);
  }
};

}  // namespace tileattn::cuda
