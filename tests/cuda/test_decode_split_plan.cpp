// plan_decode_splits: host arithmetic, no GPU needed (an H100's 132 SMs x 2 CTAs as the device).
#include <gtest/gtest.h>

#include <cstdint>

#include "cuda/common/decode_split_plan.hpp"

namespace {

using tileattn::cuda::DecodeSplitPlan;
using tileattn::cuda::plan_decode_splits;

constexpr std::int64_t kSlots = 264;

TEST(DecodeSplitPlan, FillsWholeWavesWithTheFewestSplits) {
  // B 8 x Hkv 8 = 64 units: 5 splits (320 CTAs) would run a second wave 21% full; 4 fill one
  // wave to 97%.
  const DecodeSplitPlan p = plan_decode_splits(64, 2048, kSlots, 0);
  EXPECT_EQ(p.splits, 4);
  EXPECT_EQ(p.split_blocks, 512);
  // B 1 x Hkv 8: 33 splits fill the device exactly, 32 to 97%: the fewer win.
  EXPECT_EQ(plan_decode_splits(8, 2048, kSlots, 0).splits, 32);
}

TEST(DecodeSplitPlan, DoesNotSplitWorkThatFillsTheDevice) {
  EXPECT_EQ(plan_decode_splits(512, 2048, kSlots, 0).splits, 1);
  EXPECT_EQ(plan_decode_splits(212, 2048, kSlots, 0).splits, 1);  // 80% of the slots
  EXPECT_GT(plan_decode_splits(200, 2048, kSlots, 0).splits, 1);
}

TEST(DecodeSplitPlan, DoesNotSplitShortWorkThatFillsAFifthOfTheDevice) {
  EXPECT_EQ(plan_decode_splits(64, 16, kSlots, 0).splits, 1);  // B 8 x Hkv 8, 1k keys
  EXPECT_GT(plan_decode_splits(64, 17, kSlots, 0).splits, 1);
  EXPECT_GT(plan_decode_splits(52, 16, kSlots, 0).splits, 1);  // under a fifth
  EXPECT_EQ(plan_decode_splits(8, 16, kSlots, 0).splits, 16);  // B 1: every block its own split
  EXPECT_EQ(plan_decode_splits(64, 16, kSlots, 4).splits, 4);  // a requested count stands
}

TEST(DecodeSplitPlan, EverySplitHoldsKeysAndTheSplitsCoverAllBlocks) {
  for (std::int64_t ctas : {1, 3, 8, 64, 100, 300})
    for (std::int64_t blocks : {1, 2, 7, 64, 65, 2048, 100000})
      for (std::int64_t requested : {0, 1, 3, 64, 1000}) {
        const DecodeSplitPlan p = plan_decode_splits(ctas, blocks, kSlots, requested);
        SCOPED_TRACE(testing::Message() << ctas << " " << blocks << " " << requested);
        EXPECT_GE(p.splits, 1);
        EXPECT_LE(p.splits, 128);
        EXPECT_GE(p.splits * p.split_blocks, blocks);
        EXPECT_LT((p.splits - 1) * p.split_blocks, blocks);  // the last split is not empty
        if (requested > 0) {
          EXPECT_LE(p.splits, requested);
        }
      }
}

TEST(DecodeSplitPlan, TakesTheRequestedCountWhereBlocksAllowIt) {
  EXPECT_EQ(plan_decode_splits(8, 64, kSlots, 3).splits, 3);
  EXPECT_EQ(plan_decode_splits(8, 2, kSlots, 3).splits, 2);
  EXPECT_EQ(plan_decode_splits(8, 2048, kSlots, 500).splits, 128);
}

}  // namespace
