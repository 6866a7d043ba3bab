// Which key block and which (batch, KV head) pair a backward CTA takes, from its grid index.
// The default order (section_pairs 0) runs a pair's key blocks one after another, so that CTAs
// running at the same time share their pair's Q, dO and dQ rows in L2. Under a causal mask the
// first key blocks of a pair are seen by the most queries (the longest CTAs), and those of the
// last pairs launched then end the grid late: a tail of up to a whole long CTA on some SMs while
// the others idle (a list-scheduling simulation of the FA3 grid on 132 SMs: 3% at D 64 and 6-7%
// at D 128 above the balanced time, lengths 1k..8k). With section_pairs S > 0 the pairs are cut
// into sections of S; a section runs key block 0 of each of its pairs, then key block 1, ...,
// so that the work is handed out longest first within a section (and the grid ends on short
// CTAs), while a section's pairs (chosen so that their rows fit in L2) still share their rows.
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/flash_bwd_params.hpp"

namespace tileattn::cuda {

struct BwdCta {
  int n_block;  // key block
  int pair;     // index over the grid's other dimensions, fastest first (e.g. chunk, hk, b)
};

// CTA `bid` of a grid of num_n_blocks x pairs CTAs. One-to-one for every section_pairs >= 0.
__host__ __device__ constexpr BwdCta bwd_cta_at(int bid, int num_n_blocks, int pairs,
                                                int section_pairs) {
  if (section_pairs <= 0) return {bid % num_n_blocks, bid / num_n_blocks};
  const int section_ctas = section_pairs * num_n_blocks;
  const int section = bid / section_ctas, within = bid % section_ctas;
  const int first_pair = section * section_pairs;
  const int in_section = pairs - first_pair < section_pairs ? pairs - first_pair : section_pairs;
  return {within / in_section, first_pair + within % in_section};
}

// The section size for a causal grid: the smallest power of two of pairs whose key blocks fill
// at least one wave of `sms` CTAs (so that the CTAs running together are handed out longest
// first across the whole GPU; powers of two divide the usual pair counts, and a short last
// section can cost what the order gains), capped by how many pairs' rows read and written
// through L2 (Q, dO and the f32 dQ rows of each query head of the pair: pair_bytes) fit in
// l2_budget bytes, and by the pairs there are. 1 is the default order again. (Sections of 128
// or 256 CTAs suit L 2k..8k on a 132-SM GPU; 192 is no better than the default order, as the
// list-scheduling simulation predicts; sorting the whole grid loses the rows' L2 reuse.)
constexpr int bwd_section_pairs(int pairs, int num_n_blocks, int sms, long long pair_bytes,
                                long long l2_budget) {
  int wave = 1;
  while (wave < pairs && static_cast<long long>(wave) * num_n_blocks < sms) wave *= 2;
  int fit = 1;
  while (fit < pairs && static_cast<long long>(fit) * 2 * pair_bytes <= l2_budget) fit *= 2;
  const int section = wave < fit ? wave : fit;
  return section < pairs ? section : pairs;
}

// The section size of a backward launch (host): key blocks longest first within sections of
// (chunk, KV head, batch) pairs where the work falls with the key block (a causal band: the right
// edge bounded, the left one not), else the default order (0); not in deterministic mode (its
// turns keep the default order). A section's rows budget: 32 MiB of the H200's 50 MiB L2.
inline int bwd_section_pairs_for(const FlashBwdParams& p, int chunks, int bucket) {
  const int pairs = chunks * p.heads_kv * p.batch;
  if (p.dq_turn != nullptr || p.window_right < 0 || p.window_left >= 0) return 0;
  const long long in_bytes = p.in_type == ElemType::f32 ? 4 : 2;
  const long long do_bytes = p.dout_type == ElemType::f32 ? 4 : 2;
  const long long row_bytes = in_bytes * p.dim + do_bytes * p.dim_v + 4LL * bucket;
  const long long pair_bytes = row_bytes * p.heads_per_kv * p.len_q_padded / chunks;
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
    return 0;
  return bwd_section_pairs(pairs, p.num_n_blocks, sms, pair_bytes, 32LL << 20);
}

}  // namespace tileattn::cuda
