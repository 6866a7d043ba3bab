// Hopper (sm_90a) forward: wgmma + TMA, warp-specialised (FlashAttention-3's structure).
//
// One CTA = one producer warpgroup + consumer_warp_groups consumer warpgroups (64 query rows
// each); block_m = 64 x consumers query rows of one (batch, head). The grid is persistent: CTAs
// take tiles from a per-launch counter until none are left. The kernel below only sets up the
// shared memory's barriers and splits the warpgroups; the parts, each in its own header:
//   flash_fwd_sm90_traits.cuh     the kernel parameter (Sm90FwdParams) and an instantiation's
//                                 constants (Sm90FwdTraits: the bucket's Sm90TileConfig and the
//                                 score policy)
//   flash_fwd_sm90_smem.cuh       shared memory: Q / K / V tiles, output staging, mbarriers
//   flash_fwd_sm90_scheduler.cuh  tile order, the persistent tile counter, a tile's work and its
//                                 hand-over from the producer to the consumers
//   flash_fwd_sm90_producer.cuh   the producer warp: TMA loads of Q, K and V into the rings
//   flash_fwd_sm90_consumer.cuh   a consumer warpgroup's tile loop: Q, the key blocks, epilogue
//   flash_fwd_sm90_mainloop.cuh   a key block's GEMMs (S = Q K^T, O += P V by wgmma) and the
//                                 ping-pong turns between the consumer warpgroups
//   flash_fwd_sm90_softmax.cuh    the online softmax: lazy rescaling, the speculative maximum
//   flash_fwd_sm90_scores.cuh     the score policies: CausalWindowScores (the fast path: causal
//                                 band, window, key lengths) and GeneralScores (mask, softcap,
//                                 ALiBi, dropout)
//   flash_fwd_sm90_epilogue.cuh   O / l through the staging buffer and TMA stores; the lse
//   flash_fwd_sm90_trace.cuh      the consumers' clock trace (a TILEATTN_FWD_TRACE build)
// The host launch is flash_fwd_sm90_launch.cuh; the tile choices are sm90/tile_config.hpp.
//
// The generated code is tuned instruction by instruction, and nvcc optimises each function
// before it inlines it, so where a part's boundary lies changes the code. The boundaries follow
// two rules that keep it unchanged: a part derives its shared-memory addresses from the aligned
// base itself (a barrier pointer computed here and passed down gives other address arithmetic),
// and a helper takes the values it reads as arguments (or references, where the caller owns
// state that the helper updates).
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/ptx.cuh"
#include "cuda/sm90/async.cuh"
#include "cuda/sm90/flash_fwd_sm90_consumer.cuh"
#include "cuda/sm90/flash_fwd_sm90_producer.cuh"
#include "cuda/sm90/flash_fwd_sm90_scores.cuh"
#include "cuda/sm90/flash_fwd_sm90_smem.cuh"
#include "cuda/sm90/flash_fwd_sm90_traits.cuh"
#include "cuda/sm90/tile_config.hpp"

namespace tileattn::cuda {

// Scores: CausalWindowScores or GeneralScores.
template <typename T, int kBucket, typename Scores>
__global__ void __launch_bounds__(sm90_tile_config(kBucket).threads(), 1)
    flash_fwd_sm90_kernel(const __grid_constant__ Sm90FwdParams params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using K = Sm90FwdTraits<T, kBucket, Scores>;
  using Smem = Sm90FwdSmem<K>;
  extern __shared__ unsigned char smem_raw[];
  T* const q_tiles = reinterpret_cast<T*>(  // the aligned base (see Sm90FwdSmem)
      smem_raw + ((1024u - (smem_address(smem_raw) & 1023u)) & 1023u));
  T* const o_stage = q_tiles + Smem::kOStageOffset;
  auto& bars = *reinterpret_cast<Sm90Barriers<K::kStages>*>(reinterpret_cast<char*>(q_tiles) +
                                                            Smem::kBarsOffset);
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < K::kQStages; ++s)
#pragma unroll
      for (int c = 0; c < K::kConsumerGroups; ++c) {
        mbarrier_init(&bars.q_full[s][c], 1);
        mbarrier_init(&bars.q_empty[s][c], 4);  // the warpgroup's warps
      }
#pragma unroll
    for (int s = 0; s < K::kStages; ++s) {
      mbarrier_init(&bars.k_full[s], 1);
      mbarrier_init(&bars.v_full[s], 1);
      mbarrier_init(&bars.k_empty[s], K::kConsumerWarps);  // one arrival per consumer warp
      mbarrier_init(&bars.v_empty[s], K::kConsumerWarps);
    }
    fence_barrier_init();
  }
  __syncthreads();
  // A warp-uniform warpgroup index (a lane-0 shuffle) where the policy asks for it (see
  // CausalWindowScores::kUniformWarpGroup).
  const int warp_group = Scores::kUniformWarpGroup
                             ? __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0)
                             : static_cast<int>(threadIdx.x) / 128;
  if (warp_group == 0)
    run_sm90_fwd_producer<K>(params, q_tiles);
  else
    run_sm90_fwd_consumer<K>(params, q_tiles, o_stage, warp_group);
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

}  // namespace tileattn::cuda
