// The sm80 backward's CTA order (src/cuda/common/bwd_cta_order.cuh): every (key block, pair) is
// taken by exactly one CTA in every order, and in sectioned order each section hands out its
// key blocks in ascending order (longest first under a causal mask). Host-only: runs without a
// GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "cuda/common/bwd_cta_order.cuh"

namespace tileattn::test {
namespace {

void check_order(int num_n_blocks, int pairs, int section_pairs) {
  SCOPED_TRACE(testing::Message() << "blocks " << num_n_blocks << " pairs " << pairs << " section "
                                  << section_pairs);
  std::vector<int> hits(static_cast<std::size_t>(num_n_blocks) * pairs, 0);
  int previous_pair_section = -1, previous_block = 0;
  for (int bid = 0; bid < num_n_blocks * pairs; ++bid) {
    const cuda::BwdCta cta = cuda::bwd_cta_at(bid, num_n_blocks, pairs, section_pairs);
    ASSERT_GE(cta.n_block, 0);
    ASSERT_LT(cta.n_block, num_n_blocks);
    ASSERT_GE(cta.pair, 0);
    ASSERT_LT(cta.pair, pairs);
    ++hits[static_cast<std::size_t>(cta.pair) * num_n_blocks + cta.n_block];
    if (section_pairs > 0) {
      // Within a section the key block never decreases; a new section starts at block 0.
      const int section = cta.pair / section_pairs;
      if (section == previous_pair_section)
        EXPECT_GE(cta.n_block, previous_block) << "bid " << bid;
      else
        EXPECT_EQ(cta.n_block, 0) << "bid " << bid;
      EXPECT_GE(section, previous_pair_section) << "bid " << bid;
      previous_pair_section = section;
      previous_block = cta.n_block;
    } else {
      EXPECT_EQ(cta.n_block, bid % num_n_blocks);
    }
  }
  for (std::size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i], 1) << "cta " << i;
}

TEST(CudaBwdCtaOrder, EveryCtaOnceAndSectionsLongestFirst) {
  for (const int blocks : {1, 2, 7, 16, 64})
    for (const int pairs : {1, 3, 8, 128, 130})
      for (const int section : {0, 1, 2, 5, 8, 12, 128, 1000}) check_order(blocks, pairs, section);
}

TEST(CudaBwdCtaOrder, SectionsFillAWaveWithinTheL2Budget) {
  constexpr long long kMiB = 1 << 20;
  // The FA3 grid at D 128 on 132 SMs: 16, 32, 64 key blocks; 2, 4, 8 MiB per pair.
  EXPECT_EQ(cuda::bwd_section_pairs(128, 16, 132, 2 * kMiB, 32 * kMiB), 16);
  EXPECT_EQ(cuda::bwd_section_pairs(64, 32, 132, 4 * kMiB, 32 * kMiB), 8);
  EXPECT_EQ(cuda::bwd_section_pairs(32, 64, 132, 8 * kMiB, 32 * kMiB), 4);
  // L2 caps it (a power of two that fits), the pairs cap it, and it is at least 1.
  EXPECT_EQ(cuda::bwd_section_pairs(128, 16, 132, 5 * kMiB, 32 * kMiB), 4);
  EXPECT_EQ(cuda::bwd_section_pairs(6, 4, 132, kMiB, 32 * kMiB), 6);
  EXPECT_EQ(cuda::bwd_section_pairs(32, 8, 132, 64 * kMiB, 32 * kMiB), 1);
  EXPECT_EQ(cuda::bwd_section_pairs(32, 1000, 132, kMiB, 32 * kMiB), 1);  // a wave per pair
}

}  // namespace
}  // namespace tileattn::test
