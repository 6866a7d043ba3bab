// Score modification and online softmax over one key block of a query tile, shared by the f32
// and the AMX kernels. Included inside an ISA namespace's anonymous namespace, after simd.hpp.
//
// Scores are kept in log2 units (scale * log2(e) folded in) so that the exponential is exp2.

constexpr int kLanes = VecF::lanes;
constexpr std::int64_t kBlockK = cpu_tile_config().block_k;
static_assert(kBlockK == cpu_tile_config(KernelFamily::amx).block_k, "families share block_k");
constexpr float kLog2e = 1.44269504088896340736f;
constexpr float kLn2 = 0.69314718055994530942f;
constexpr float kNegInf = -__builtin_inff();
static_assert(kBlockK % kLanes == 0, "score rows hold whole vectors");

// Calls f.template operator()<R>() for R = rows (1 <= rows <= MaxRows).
template <int MaxRows, typename F>
inline void with_rows(std::int64_t rows, F&& f) {
  [&]<int... R>(std::integer_sequence<int, R...>) {
    ((rows == R + 1 ? f.template operator()<R + 1>() : void()), ...);
  }
  (std::make_integer_sequence<int, MaxRows>{});
}

// Turns one row of raw dot products into log2-unit scores: scale, softcap, ALiBi, additive
// mask, then -inf outside [first, last) and where the boolean mask is false.
void modify_row(const TileJob& job, std::int64_t r, std::int64_t key0, bool needs_masking,
                float* row) {
  const std::int64_t first = job.key_first[r], last = job.key_last[r];
  const VecF scale_log2 = splat(job.scale_log2);
  const bool capped = job.softcap > 0.0f;
  const float two_log2e_over_cap = capped ? 2.0f * kLog2e / job.softcap : 0.0f;
  const VecF alibi_slope_log2 = splat(job.alibi_slope * kLog2e);
  const float alibi_pos = static_cast<float>(job.alibi_pos0 + r - key0);
  for (std::int64_t c = 0; c < kBlockK; c += kLanes) {
    // A scaled score beyond f32's range (either sign) or NaN becomes NaN here, so that it
    // poisons its row where the key is visible (the masks below replace it elsewhere):
    // s + 0 * s is s for finite s and NaN otherwise.
    VecF s = load(row + c);
    if (capped) {
      s = mul(s, splat(job.scale));
      s = fma(s, zero(), s);
      s = mul(softcap(s, job.softcap, two_log2e_over_cap), splat(kLog2e));
    } else {
      s = mul(s, scale_log2);
      s = fma(s, zero(), s);
    }
    if (job.alibi_slope != 0.0f) {
      // |pos(i) - j| with j = key0 + c + lane.
      const VecF distance = vabs(sub(splat(alibi_pos - static_cast<float>(c)), lane_index()));
      s = sub(s, mul(alibi_slope_log2, distance));
    }
    if (needs_masking) s = mask_outside(s, key0 + c, first, last);
    store(row + c, s);
  }
  if (job.additive_mask != nullptr || job.bool_mask != nullptr) {
    const std::int64_t stride_k = job.mask_stride_k;
    const std::int64_t end = (last < key0 + kBlockK ? last : key0 + kBlockK) - key0;
    const std::int64_t begin = (first > key0 ? first : key0) - key0;
    if (job.additive_mask != nullptr) {
      const float* m = job.additive_mask + r * job.mask_stride_q + key0 * stride_k;
      // -inf masks the key whatever its score (an overflowed +inf score plus -inf would be NaN).
      for (std::int64_t c = begin; c < end; ++c)
        row[c] = m[c * stride_k] == kNegInf ? kNegInf : row[c] + m[c * stride_k] * kLog2e;
    } else {
      const std::uint8_t* m = job.bool_mask + r * job.mask_stride_q + key0 * stride_k;
      for (std::int64_t c = begin; c < end; ++c)
        if (m[c * stride_k] == 0) row[c] = kNegInf;
    }
  }
}

// The running max of a row moves only when a block's max exceeds it by more than this (log2
// units), so most blocks leave the accumulator unscaled (row_scale exactly 1). Probabilities then
// stay below 2^8 and the final normalisation by the row's sum is exact all the same.
constexpr float kRescaleThreshold = 8.0f;

// Row statistics [p, p + n) as a vector (lanes from n on: `fill`), and back; masked for n <
// kLanes (scalar stores feeding a vector load would stall on store forwarding).
inline VecF load_stats(const float* p, int n, float fill) {
  return n == kLanes ? load(p) : load_first(p, n, fill);
}
inline void store_stats(float* p, int n, VecF x) {
  if (n == kLanes)
    store(p, x);
  else
    store_first(p, n, x);
}

// The largest query tile of the kernel families that share this code (amx: 64 rows).
constexpr int kMaxTileRows = 64;
constexpr int kMaxRowGroups = (kMaxTileRows + kLanes - 1) / kLanes;
static_assert(cpu_tile_config(KernelFamily::f32).block_q <= kMaxTileRows &&
                  cpu_tile_config(KernelFamily::amx).block_q <= kMaxTileRows &&
                  cpu_tile_config(KernelFamily::bf16_dot).block_q <= kMaxTileRows,
              "softmax_rows holds one tile's rows");

// Online softmax for all rows of the tile's scores, already in log2 units once multiplied by
// `multiplier` (> 0; 1 for rows that modify_row has scaled, scale * log2(e) for plain rows, so
// that the scaling folds into the exponent's FMA). Updates the running max and sum, turns the
// scores into probabilities exp2(multiplier * s - max) in place and records the accumulator's
// rescale factors. Rows go in groups of kLanes: a group's block maxima and sums come from one
// transposing reduction tree (reduce_rows_*) and its running statistics are vectors across
// rows. Each phase runs over every group before the next starts, so that the groups' short
// dependency chains (trees, statistics) overlap instead of following one another.
//
// Plain rows (multiplier != 1: raw dot products, every key visible) are also checked for a
// -inf score, which only an overflowing or non-finite dot product gives; it poisons the row
// (NaN and +inf turn the row's sum NaN on their own).
inline void softmax_rows(const TileJob& job, float multiplier) {
  const int rows = static_cast<int>(job.rows);
  const int groups = (rows + kLanes - 1) / kLanes;
  VecF partial[kMaxRowGroups * kLanes];  // per row: the lane-wise max of its scores
  for (int r = 0; r < rows; ++r) {
    const float* row = job.scores + r * kBlockK;
    VecF m = load(row);
    if (multiplier != 1.0f) {
      VecF low = m;
      for (std::int64_t c = kLanes; c < kBlockK; c += kLanes) {
        const VecF x = load(row + c);
        m = vmax(m, x);
        low = vmin(low, x);
      }
      if (reduce_max(sub(zero(), low)) == __builtin_inff()) job.row_poison[r] = 1;
    } else {
      for (std::int64_t c = kLanes; c < kBlockK; c += kLanes) m = vmax(m, load(row + c));
    }
    partial[r] = m;
  }
  for (int r = rows; r < groups * kLanes; ++r) partial[r] = splat(kNegInf);

  alignas(64) float neg_base[kMaxRowGroups * kLanes];
  VecF alpha[kMaxRowGroups];
  for (int g = 0; g < groups; ++g) {
    const int r0 = g * kLanes, n = rows - r0 < kLanes ? rows - r0 : kLanes;
    const VecF old_max = load_stats(job.row_max + r0, n, kNegInf);
    const VecF block_max = mul(reduce_rows_max(partial + r0), splat(multiplier));
    const VecF new_max =
        select_greater(block_max, add(old_max, splat(kRescaleThreshold)), block_max, old_max);
    // A row with nothing visible yet keeps max -inf; its exponent base is then finite, so that
    // its probabilities and its rescale factor come out as exactly 0.
    const VecF base = vmax(new_max, splat(-__FLT_MAX__));
    alpha[g] = exp2_nonpositive(sub(old_max, base));  // exactly 1 when the max stays
    store_stats(job.row_max + r0, n, new_max);
    store_stats(job.row_scale + r0, n, alpha[g]);
    store(neg_base + r0, sub(zero(), base));
  }

  // Folding the multiplier into the exponent's FMA rounds the product differently from the
  // maximum's, by up to half an ulp of the score: beyond ~2^20 that exceeds what exp2 can take
  // (scores of 1e20 would give Inf). Such blocks are scaled first, with the maximum's own rounding.
  // (Rows with nothing visible have base -FLT_MAX, which is excluded.)
  bool huge = false;
  if (multiplier != 1.0f)
    for (int r = 0; r < rows; ++r) {
      const float magnitude = __builtin_fabsf(neg_base[r]);
      huge |= magnitude > 0x1p20f && magnitude < __FLT_MAX__;
    }
  if (huge) {
    for (int r = 0; r < rows; ++r) {
      float* row = job.scores + r * kBlockK;
      for (std::int64_t c = 0; c < kBlockK; c += kLanes)
        store(row + c, mul(load(row + c), splat(multiplier)));
    }
    multiplier = 1.0f;
  }
  const VecF scale = splat(multiplier);
  VecF sums[kMaxRowGroups * kLanes];
  for (int r = 0; r < rows; ++r) {
    float* row = job.scores + r * kBlockK;
    const VecF shift = splat(neg_base[r]);
    VecF sum = zero();
    for (std::int64_t c = 0; c < kBlockK; c += kLanes) {
      const VecF prob = exp2_nonpositive(fma(load(row + c), scale, shift));
      sum = add(sum, prob);
      store(row + c, prob);
    }
    sums[r] = sum;
  }
  for (int r = rows; r < groups * kLanes; ++r) sums[r] = zero();
  for (int g = 0; g < groups; ++g) {
    const int r0 = g * kLanes, n = rows - r0 < kLanes ? rows - r0 : kLanes;
    const VecF old_sum = load_stats(job.row_sum + r0, n, 0.0f);
    store_stats(job.row_sum + r0, n, fma(old_sum, alpha[g], reduce_rows_add(sums + r0)));
  }
}

// Per-tile facts that decide how much work each key block's rows need.
struct TileBounds {
  std::int64_t max_first, min_last;  // intersection of the rows' visible ranges
  bool has_mods;  // softcap, ALiBi or a non-positive scale: every block goes through modify_row
  bool has_mask;  // a mask tensor: every block goes through modify_row
};

// Resets the running statistics and the accumulator; returns the tile's bounds.
inline TileBounds begin_tile(const TileJob& job) {
  TileBounds t{0, INT64_MAX, false, false};
  for (std::int64_t r = 0; r < job.rows; ++r) {
    job.row_max[r] = kNegInf;
    job.row_sum[r] = 0.0f;
    job.row_poison[r] = 0;
    for (std::int64_t c = 0; c < job.dim_v_padded; ++c) job.out[r * job.dim_v_padded + c] = 0.0f;
    t.max_first = job.key_first[r] > t.max_first ? job.key_first[r] : t.max_first;
    t.min_last = job.key_last[r] < t.min_last ? job.key_last[r] : t.min_last;
  }
  t.has_mods = job.softcap > 0.0f || job.alibi_slope != 0.0f || job.scale_log2 <= 0.0f;
  t.has_mask = job.bool_mask != nullptr || job.additive_mask != nullptr;
  return t;
}

// Flags the rows that see one of the block's poisoned keys (whose packed K and V are zero, so
// their scores are finite exactly where they are visible). In a plain block every row sees
// every key; otherwise the masked scores are -inf by now.
inline void mark_poisoned_rows(const TileJob& job, std::int64_t key0, bool plain) {
  const std::uint64_t* words = job.key_poison + (key0 / kBlockK) * 2;
  for (int w = 0; w < 2; ++w)
    for (std::uint64_t bits = words[w]; bits != 0; bits &= bits - 1) {
      const std::int64_t c = w * 64 + __builtin_ctzll(bits);
      for (std::int64_t r = 0; r < job.rows; ++r)
        if (plain || job.scores[r * kBlockK + c] != kNegInf) job.row_poison[r] = 1;
    }
}

// Turns the raw scores of the block starting at key0 (job.scores, [rows][block_k]) into
// probabilities and per-row rescale factors.
inline void softmax_block(const TileJob& job, const TileBounds& t, std::int64_t key0) {
  // Blocks entirely inside every row's visible range skip element-wise range masking; plain
  // ones also fold the scale into the exponent.
  const bool interior = key0 >= t.max_first && key0 + kBlockK <= t.min_last;
  const bool plain = interior && !t.has_mods && !t.has_mask;
  if (!plain)
    for (std::int64_t r = 0; r < job.rows; ++r)
      modify_row(job, r, key0, !interior, job.scores + r * kBlockK);
  if (job.key_poison != nullptr) mark_poisoned_rows(job, key0, plain);
  softmax_rows(job, plain ? job.scale_log2 : 1.0f);
}

// Normalises the accumulated rows and writes the log-sum-exp (natural log).
inline void finish_tile(const TileJob& job) {
  const std::int64_t dvp = job.dim_v_padded;
  for (std::int64_t r = 0; r < job.rows; ++r) {
    const float sum = job.row_sum[r];
    float* o = job.out + r * dvp;
    // A poisoned row, or one whose sum went NaN (a NaN or +inf score: f32 overflow), is NaN
    // throughout; -inf stays "no key with weight".
    if (job.row_poison[r] != 0 || sum != sum) {
      for (std::int64_t c = 0; c < dvp; c += kLanes) store(o + c, splat(__builtin_nanf("")));
      job.lse[r] = __builtin_nanf("");
      continue;
    }
    const VecF inv = splat(sum > 0.0f ? 1.0f / sum : 0.0f);
    for (std::int64_t c = 0; c < dvp; c += kLanes) store(o + c, mul(load(o + c), inv));
    job.lse[r] = sum > 0.0f ? (job.row_max[r] + __builtin_log2f(sum)) * kLn2 : kNegInf;
  }
}
