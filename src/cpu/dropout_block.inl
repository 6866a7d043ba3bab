// The dropout keep/drop decisions of one score block, shared by the f32 forward and backward
// kernels. Included inside an ISA namespace's anonymous namespace; common/philox.hpp defines the
// decision (docs/semantics.md), so every backend drops the same elements.

// keep[r * kBlockK + c] = keep_scale if element (row0 + r, key0 + c) of head (b, h) is kept,
// else 0, for r < rows. key0 is a multiple of 4: each Philox call decides four keys.
inline void dropout_factors(const DropoutParams& d, std::int64_t b, std::int64_t h,
                            std::int64_t row0, std::int64_t rows, std::int64_t key0, float* keep) {
  static_assert(kBlockK % 4 == 0, "one Philox call decides four keys");
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < kBlockK; c += 4) {
      const Philox4x32 words = dropout_words(d, b, h, row0 + r, (key0 + c) >> 2);
      for (int n = 0; n < 4; ++n)
        keep[r * kBlockK + c + n] = words.v[n] >= d.threshold ? d.keep_scale : 0.0f;
    }
}

// rows[r][c] *= keep[r][c] for r < rows.
inline void apply_factors(const float* keep, std::int64_t rows, float* values) {
  for (std::int64_t n = 0; n < rows * kBlockK; n += kLanes)
    store(values + n, mul(load(values + n), load(keep + n)));
}
