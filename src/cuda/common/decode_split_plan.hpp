// How many splits of the keys the decode kernel runs per (sequence, kv head, row tile): host
// arithmetic only, kept apart so that it is tested without a GPU.
#pragma once

#include <algorithm>
#include <cstdint>

namespace tileattn::cuda {

// The most splits a plan holds (the combine kernel's lanes hold the lse of all of them).
inline constexpr std::int64_t kMaxDecodeSplits = 128;

struct DecodeSplitPlan {
  std::int64_t splits;        // CTAs per (sequence, kv head, row tile)
  std::int64_t split_blocks;  // key blocks per split (the last split may hold fewer)
};

// Key blocks per unit at or below which a grid filling a fifth of the device is not split: so
// few keys per CTA leave the split little to gain against its partial-result round trip and the
// combine (at B 8 x Hkv 8 over 16 blocks the unsplit grid reads faster than four splits).
inline constexpr std::int64_t kDecodeShortBlocks = 16;

// `ctas` units of work (sequences x kv heads x row tiles) over `blocks` key blocks, on a device
// holding `slots` CTAs at once (SMs x CTAs per SM). Work that fills most of the device is not
// split (a split costs a partial-result round trip and the combine), nor short work that fills a
// fifth of it (kDecodeShortBlocks). Otherwise the fewest splits
// whose last wave is nearly full: a grid of 1.2 waves runs as long as one of 2, so the count
// that fills whole waves (within 5% of the best fill any count reaches) wins over a larger one.
// `requested` > 0 (the caller's num_splits) is taken as it is, within [1, min(blocks,
// max_splits)].
inline DecodeSplitPlan plan_decode_splits(std::int64_t ctas, std::int64_t blocks,
                                          std::int64_t slots, std::int64_t requested,
                                          std::int64_t max_splits = kMaxDecodeSplits) {
  ctas = std::max<std::int64_t>(ctas, 1);
  blocks = std::max<std::int64_t>(blocks, 1);
  slots = std::max<std::int64_t>(slots, 1);
  const auto even = [&](std::int64_t s) {
    const std::int64_t per = (blocks + s - 1) / s;
    return DecodeSplitPlan{(blocks + per - 1) / per, per};
  };
  if (requested > 0) return even(std::min({requested, blocks, max_splits}));
  if (ctas * 5 >= slots * 4) return even(1);
  if (blocks <= kDecodeShortBlocks && ctas * 5 >= slots) return even(1);
  const std::int64_t most = std::min(blocks, max_splits);
  const auto fill = [&](std::int64_t s) {
    const std::int64_t grid = ctas * s, waves = (grid + slots - 1) / slots;
    return static_cast<double>(grid) / static_cast<double>(waves * slots);
  };
  double best = 0.0;
  for (std::int64_t s = 1; s <= most; ++s)
    if (even(s).splits == s) best = std::max(best, fill(s));
  for (std::int64_t s = 1; s <= most; ++s)
    if (even(s).splits == s && fill(s) >= 0.95 * best) return even(s);
  return even(most);
}

}  // namespace tileattn::cuda
