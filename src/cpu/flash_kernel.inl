// The compute kernel of the CPU flash forward for one query tile: stream the key blocks,
// S = Q K^T (register-blocked micro-kernel), score modifications and masking, online softmax
// in log2 units with exp2, O = alpha * O + P V (register-blocked micro-kernel), normalise.
//
// Compiled once per ISA (see kernel_*.cpp); TILEATTN_ISA_NAMESPACE and TILEATTN_KERNEL_GETTER are
// set by the including file. Only raw pointers and the plain structs of kernels.hpp cross in.
#include <cstdint>
#include <utility>

#include "cpu/kernels.hpp"
#include "cpu/simd.hpp"
#include "cpu/tile_config.hpp"

namespace tileattn::detail::TILEATTN_ISA_NAMESPACE {
namespace {

constexpr int kLanes = VecF::lanes;
constexpr std::int64_t kBlockQ = cpu_tile_config().block_q;
constexpr std::int64_t kBlockK = cpu_tile_config().block_k;
constexpr std::int64_t kPanelK = cpu_tile_config().k_panel;
constexpr std::int64_t kPanelV = cpu_tile_config().v_panel;
constexpr float kLog2e = 1.44269504088896340736f;
constexpr float kLn2 = 0.69314718055994530942f;
constexpr float kNegInf = -__builtin_inff();

// Register blocking: the S micro-tile is kQkRows x one K panel (kQkVecs vectors); the O
// micro-tile is kPvRows x kPvVecs vectors.
constexpr int kQkVecs = static_cast<int>(kPanelK) / kLanes;
constexpr int kQkRows = kLanes == 16 ? 12 : 3;
constexpr int kPvRows = 6;
constexpr int kPvVecs = kLanes == 16 ? 4 : 2;
static_assert(kPanelK % kLanes == 0 && kBlockK % kPanelK == 0, "K panels hold whole vectors");
static_assert(kPanelV % (kPvVecs * kLanes) == 0, "V panels hold whole O micro-tiles");
static_assert(cpu_tile_config().dv_align % kLanes == 0, "padded Dv must hold whole vectors");

// Calls f.template operator()<R>() for R = rows (1 <= rows <= MaxRows).
template <int MaxRows, typename F>
inline void with_rows(std::int64_t rows, F&& f) {
  [&]<int... R>(std::integer_sequence<int, R...>) {
    ((rows == R + 1 ? f.template operator()<R + 1>() : void()), ...);
  }(std::make_integer_sequence<int, MaxRows>{});
}

// scores[r][col0 .. col0 + 2*kLanes) = q[r] . k[col] for r < Rows.
// scores[r][col0 .. col0 + kPanelK) = q[r] . k[col] for r < Rows. q is the transposed Q tile
// ([dim][block_q]) offset to the first row, so that the Rows broadcasts of one d come from one
// cache line; k_panel is one contiguous [dim][kPanelK] panel.
template <int Rows>
inline void qk_micro(const float* q, std::int64_t dim, const float* k_panel, std::int64_t col0,
                     float* scores) {
  VecF acc[Rows][kQkVecs];
  for (int r = 0; r < Rows; ++r)
    for (int c = 0; c < kQkVecs; ++c) acc[r][c] = zero();
  const float* k = k_panel;
  for (std::int64_t d = 0; d < dim; ++d, k += kPanelK, q += kBlockQ) {
    VecF kv[kQkVecs];
    for (int c = 0; c < kQkVecs; ++c) kv[c] = load(k + c * kLanes);
    for (int r = 0; r < Rows; ++r) {
      const VecF a = splat(q[r]);
      for (int c = 0; c < kQkVecs; ++c) acc[r][c] = fma(a, kv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < Rows; ++r)
    for (int c = 0; c < kQkVecs; ++c) store(scores + r * kBlockK + col0 + c * kLanes, acc[r][c]);
}

void scores_block(const TileJob& job, const float* k_block) {
  // Panels outermost: one contiguous K panel stays in L1 across the row chunks.
  for (std::int64_t col0 = 0; col0 < kBlockK; col0 += kPanelK) {
    const float* panel = k_block + col0 * job.dim;
    std::int64_t r0 = 0;
    for (; r0 + kQkRows <= job.rows; r0 += kQkRows)
      qk_micro<kQkRows>(job.q + r0, job.dim, panel, col0, job.scores + r0 * kBlockK);
    if (r0 < job.rows)
      with_rows<kQkRows - 1>(job.rows - r0, [&]<int R>() {
        qk_micro<R>(job.q + r0, job.dim, panel, col0, job.scores + r0 * kBlockK);
      });
  }
}

// out[r][col0 + c*kLanes ..] = row_scale[r] * out[r] + sum_k p[r][k] * v[k] for r < Rows,
// over Vecs vectors of one V panel ([block_k][width], contiguous).
template <int Rows, int Vecs>
inline void pv_micro(const float* p, const float* v_panel, std::int64_t width, std::int64_t dvp,
                     std::int64_t col0, const float* row_scale, float* out) {
  VecF acc[Rows][Vecs];
  for (int r = 0; r < Rows; ++r) {
    const VecF alpha = splat(row_scale[r]);
    for (int c = 0; c < Vecs; ++c) acc[r][c] = mul(alpha, load(out + r * dvp + col0 + c * kLanes));
  }
  const float* v = v_panel;
  for (std::int64_t k = 0; k < kBlockK; ++k, v += width) {
    VecF vk[Vecs];
    for (int c = 0; c < Vecs; ++c) vk[c] = load(v + c * kLanes);
    for (int r = 0; r < Rows; ++r) {
      const VecF a = splat(p[r * kBlockK + k]);
      for (int c = 0; c < Vecs; ++c) acc[r][c] = fma(a, vk[c], acc[r][c]);
    }
  }
  for (int r = 0; r < Rows; ++r)
    for (int c = 0; c < Vecs; ++c) store(out + r * dvp + col0 + c * kLanes, acc[r][c]);
}

// Columns [col0, col0 + Vecs*kLanes) of the output, which lie in the V panel starting at panel0.
template <int Vecs>
void pv_columns(const TileJob& job, const float* v_block, std::int64_t panel0, std::int64_t col0) {
  const std::int64_t dvp = job.dim_v_padded;
  const std::int64_t width = (dvp - panel0) < kPanelV ? dvp - panel0 : kPanelV;
  const float* v = v_block + kBlockK * panel0 + (col0 - panel0);
  std::int64_t r0 = 0;
  for (; r0 + kPvRows <= job.rows; r0 += kPvRows)
    pv_micro<kPvRows, Vecs>(job.scores + r0 * kBlockK, v, width, dvp, col0, job.row_scale + r0,
                            job.out + r0 * dvp);
  if (r0 < job.rows)
    with_rows<kPvRows - 1>(job.rows - r0, [&]<int R>() {
      pv_micro<R, Vecs>(job.scores + r0 * kBlockK, v, width, dvp, col0, job.row_scale + r0,
                        job.out + r0 * dvp);
    });
}

void accumulate_block(const TileJob& job, const float* v_block) {
  // Column chunks outermost: one V panel stays in L1 across the row chunks.
  for (std::int64_t panel0 = 0; panel0 < job.dim_v_padded; panel0 += kPanelV) {
    const std::int64_t panel_end =
        panel0 + kPanelV < job.dim_v_padded ? panel0 + kPanelV : job.dim_v_padded;
    std::int64_t col0 = panel0;
    for (; col0 + kPvVecs * kLanes <= panel_end; col0 += kPvVecs * kLanes)
      pv_columns<kPvVecs>(job, v_block, panel0, col0);
    for (; col0 < panel_end; col0 += kLanes) pv_columns<1>(job, v_block, panel0, col0);
  }
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
    VecF s = load(row + c);
    if (capped)
      s = mul(softcap(mul(s, splat(job.scale)), job.softcap, two_log2e_over_cap), splat(kLog2e));
    else
      s = mul(s, scale_log2);
    if (job.alibi_slope != 0.0f) {
      // |pos(i) - j| with j = key0 + c + lane.
      const VecF distance =
          vabs(sub(splat(alibi_pos - static_cast<float>(c)), lane_index()));
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
      for (std::int64_t c = begin; c < end; ++c) row[c] += m[c * stride_k] * kLog2e;
    } else {
      const std::uint8_t* m = job.bool_mask + r * job.mask_stride_q + key0 * stride_k;
      for (std::int64_t c = begin; c < end; ++c)
        if (m[c * stride_k] == 0) row[c] = kNegInf;
    }
  }
}

// Online softmax for one row of scores already in log2 units once multiplied by `multiplier`
// (> 0; 1 for rows that modify_row has scaled, scale * log2(e) for plain rows, so that the
// scaling folds into the exponent's FMA). Updates the running max and sum, turns the scores
// into probabilities exp2(multiplier * s - max) in place and records the accumulator's rescale
// factor.
inline void softmax_row(const TileJob& job, std::int64_t r, float multiplier, float* row) {
  VecF m = load(row);
  for (std::int64_t c = kLanes; c < kBlockK; c += kLanes) m = vmax(m, load(row + c));
  const float block_max = reduce_max(m) * multiplier;
  const float old_max = job.row_max[r];
  const float new_max = block_max > old_max ? block_max : old_max;
  if (new_max == kNegInf) {  // nothing visible yet: probabilities are 0, accumulator stays 0
    for (std::int64_t c = 0; c < kBlockK; c += kLanes) store(row + c, zero());
    job.row_scale[r] = 1.0f;
    return;
  }
  const VecF scale = splat(multiplier), shift = splat(-new_max);
  VecF sum = zero();
  for (std::int64_t c = 0; c < kBlockK; c += kLanes) {
    const VecF prob = exp2_nonpositive(fma(load(row + c), scale, shift));
    sum = add(sum, prob);
    store(row + c, prob);
  }
  const float alpha = old_max == kNegInf ? 0.0f : __builtin_exp2f(old_max - new_max);
  job.row_scale[r] = alpha;
  job.row_sum[r] = job.row_sum[r] * alpha + reduce_add(sum);
  job.row_max[r] = new_max;
}

void attend_tile(const TileJob& job) {
  const std::int64_t rows = job.rows, dvp = job.dim_v_padded;
  std::int64_t max_first = 0, min_last = INT64_MAX;
  for (std::int64_t r = 0; r < rows; ++r) {
    job.row_max[r] = kNegInf;
    job.row_sum[r] = 0.0f;
    for (std::int64_t c = 0; c < dvp; ++c) job.out[r * dvp + c] = 0.0f;
    max_first = job.key_first[r] > max_first ? job.key_first[r] : max_first;
    min_last = job.key_last[r] < min_last ? job.key_last[r] : min_last;
  }
  // Plain rows (no modification, no masking, positive scale) fold the scale into the softmax.
  const bool has_mods = job.softcap > 0.0f || job.alibi_slope != 0.0f || job.scale_log2 <= 0.0f;
  const bool has_mask = job.bool_mask != nullptr || job.additive_mask != nullptr;

  for (std::int64_t kb = job.block_begin; kb < job.block_end; ++kb) {
    const std::int64_t key0 = kb * kBlockK;
    scores_block(job, job.k_packed + kb * job.dim * kBlockK);
    // Blocks entirely inside every row's visible range skip element-wise range masking.
    const bool interior = key0 >= max_first && key0 + kBlockK <= min_last;
    for (std::int64_t r = 0; r < rows; ++r) {
      float* row = job.scores + r * kBlockK;
      if (!interior || has_mods || has_mask) {
        modify_row(job, r, key0, !interior, row);
        softmax_row(job, r, 1.0f, row);
      } else {
        softmax_row(job, r, job.scale_log2, row);
      }
    }
    accumulate_block(job, job.v_packed + kb * kBlockK * dvp);
  }

  for (std::int64_t r = 0; r < rows; ++r) {
    const float sum = job.row_sum[r];
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    float* o = job.out + r * dvp;
    for (std::int64_t c = 0; c < dvp; c += kLanes) store(o + c, mul(load(o + c), splat(inv)));
    job.lse[r] = sum > 0.0f ? (job.row_max[r] + __builtin_log2f(sum)) * kLn2 : kNegInf;
  }
}

}  // namespace
}  // namespace tileattn::detail::TILEATTN_ISA_NAMESPACE

namespace tileattn::detail {
TileKernel TILEATTN_KERNEL_GETTER() { return &TILEATTN_ISA_NAMESPACE::attend_tile; }
}  // namespace tileattn::detail
