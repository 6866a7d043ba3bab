// The compute kernel of the CPU flash forward for one query tile: stream the key blocks,
// S = Q K^T (register-blocked micro-kernel), score modifications and masking, online softmax
// in log2 units with exp2, O = alpha * O + P V (register-blocked micro-kernel), normalise.
//
// Compiled once per ISA (see kernel_*.cpp); TILEATTN_ISA_NAMESPACE and TILEATTN_KERNEL_GETTER are
// set by the including file. Only raw pointers and the plain structs of kernels.hpp cross in.
#include <cstdint>
#include <utility>

#include "common/philox.hpp"
#include "cpu/kernels.hpp"
#include "cpu/simd.hpp"
#include "cpu/tile_config.hpp"

namespace tileattn::detail::TILEATTN_ISA_NAMESPACE {
namespace {

#include "cpu/online_softmax.inl"
// After online_softmax.inl: it uses kLanes and kBlockK.
#include "cpu/dropout_block.inl"

constexpr std::int64_t kBlockQ = cpu_tile_config().block_q;
constexpr std::int64_t kPanelK = cpu_tile_config().k_panel;
constexpr std::int64_t kPanelV = cpu_tile_config().v_panel;

// Register blocking: the S micro-tile is kQkRows x one K panel (kQkVecs vectors); the O
// micro-tile is kPvRows x kPvVecs vectors.
constexpr int kQkVecs = static_cast<int>(kPanelK) / kLanes;
constexpr int kQkRows = static_cast<int>(f32_q_group_rows(kLanes));
constexpr int kPvRows = 6;
constexpr int kPvVecs = kLanes == 16 ? 4 : 2;
static_assert(kPanelK % kLanes == 0 && kBlockK % kPanelK == 0, "K panels hold whole vectors");
static_assert(kPanelV % (kPvVecs * kLanes) == 0, "V panels hold whole O micro-tiles");
static_assert(cpu_tile_config().dv_align % kLanes == 0, "padded Dv must hold whole vectors");

// scores[r][col0 .. col0 + kPanelK) = q[r] . k[col] for r < Rows. q is one group of the Q tile
// ([dim][kQkRows], tile_config.hpp), so that the Rows broadcasts of one d are adjacent and a
// micro-tile streams through kQkRows * 4 bytes per d; k_panel is one contiguous [dim][kPanelK]
// panel.
template <int Rows>
inline void qk_micro(const float* q, std::int64_t dim, const float* k_panel, std::int64_t col0,
                     float* scores) {
  // dim >= 1 (validated); telling g++ so keeps the accumulators in registers instead of
  // copying them through the stack around a loop that might not run.
  if (dim < 1) __builtin_unreachable();
  VecF acc[Rows][kQkVecs];
  for (int r = 0; r < Rows; ++r)
    for (int c = 0; c < kQkVecs; ++c) acc[r][c] = zero();
  const float* k = k_panel;
  for (std::int64_t d = 0; d < dim; ++d, k += kPanelK, q += kQkRows) {
    // Software prefetch 16 steps ahead: L1 cannot hold Q tile + K panel + scores at once, so
    // the next steps' K and Q lines are requested before the FMAs need them.
    __builtin_prefetch(k + 16 * kPanelK);
    __builtin_prefetch(k + 16 * kPanelK + 16);
    __builtin_prefetch(q + 16 * kQkRows);
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
  // The driver packs Q for the micro-tile height it expects of this kernel (tile_config.hpp).
  if (job.q_group != kQkRows) __builtin_trap();
  // Panels outermost: one contiguous K panel stays in L1 across the row chunks.
  for (std::int64_t col0 = 0; col0 < kBlockK; col0 += kPanelK) {
    const float* panel = k_block + col0 * job.dim;
    std::int64_t r0 = 0;
    for (; r0 + kQkRows <= job.rows; r0 += kQkRows)
      qk_micro<kQkRows>(static_cast<const float*>(job.q) + r0 * job.dim, job.dim, panel, col0,
                        job.scores + r0 * kBlockK);
    if (r0 < job.rows)
      with_rows<kQkRows - 1>(job.rows - r0, [&]<int R>() {
        qk_micro<R>(static_cast<const float*>(job.q) + r0 * job.dim, job.dim, panel, col0,
                    job.scores + r0 * kBlockK);
      });
  }
}

// out[r][col0 + c*kLanes ..] = row_scale[r] * out[r] + sum_k p[r][k] * v[k] for r < Rows,
// over Vecs vectors of one V panel ([block_k][width], contiguous). Without Rescale every
// row_scale is 1 and the accumulator starts from out as it is.
template <int Rows, int Vecs, bool Rescale>
inline void pv_micro(const float* p, const float* v_panel, std::int64_t width, std::int64_t dvp,
                     std::int64_t col0, const float* row_scale, float* out) {
  VecF acc[Rows][Vecs];
  for (int r = 0; r < Rows; ++r)
    for (int c = 0; c < Vecs; ++c) {
      acc[r][c] = load(out + r * dvp + col0 + c * kLanes);
      if constexpr (Rescale) acc[r][c] = mul(splat(row_scale[r]), acc[r][c]);
    }
  const float* v = v_panel;
  for (std::int64_t k = 0; k < kBlockK; ++k, v += width) {
    // One prefetch per 64-byte line of the row's columns (V rows are 64-byte aligned).
    constexpr int kVecsPerLine = 16 / kLanes > 0 ? 16 / kLanes : 1;
    for (int c = 0; c < Vecs; c += kVecsPerLine) __builtin_prefetch(v + 16 * width + c * kLanes);
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
template <int Vecs, bool Rescale>
void pv_columns(const TileJob& job, const float* v_block, std::int64_t panel0, std::int64_t col0) {
  const std::int64_t dvp = job.dim_v_padded;
  const std::int64_t width = (dvp - panel0) < kPanelV ? dvp - panel0 : kPanelV;
  const float* v = v_block + kBlockK * panel0 + (col0 - panel0);
  std::int64_t r0 = 0;
  for (; r0 + kPvRows <= job.rows; r0 += kPvRows)
    pv_micro<kPvRows, Vecs, Rescale>(job.scores + r0 * kBlockK, v, width, dvp, col0,
                                     job.row_scale + r0, job.out + r0 * dvp);
  if (r0 < job.rows)
    with_rows<kPvRows - 1>(job.rows - r0, [&]<int R>() {
      pv_micro<R, Vecs, Rescale>(job.scores + r0 * kBlockK, v, width, dvp, col0, job.row_scale + r0,
                                 job.out + r0 * dvp);
    });
}

template <bool Rescale>
void accumulate_columns(const TileJob& job, const float* v_block) {
  // Column chunks outermost: one V panel stays in L1 across the row chunks.
  for (std::int64_t panel0 = 0; panel0 < job.dim_v_padded; panel0 += kPanelV) {
    const std::int64_t panel_end =
        panel0 + kPanelV < job.dim_v_padded ? panel0 + kPanelV : job.dim_v_padded;
    std::int64_t col0 = panel0;
    for (; col0 + kPvVecs * kLanes <= panel_end; col0 += kPvVecs * kLanes)
      pv_columns<kPvVecs, Rescale>(job, v_block, panel0, col0);
    for (; col0 < panel_end; col0 += kLanes) pv_columns<1, Rescale>(job, v_block, panel0, col0);
  }
}

void accumulate_block(const TileJob& job, const float* v_block) {
  // The running max moves rarely (kRescaleThreshold): most blocks leave every row_scale at
  // exactly 1, and their P V then skips the multiplication of the accumulator.
  bool rescale = false;
  for (std::int64_t r = 0; r < job.rows; ++r) rescale |= job.row_scale[r] != 1.0f;
  if (rescale)
    accumulate_columns<true>(job, v_block);
  else
    accumulate_columns<false>(job, v_block);
}

void attend_tile(const TileJob& job) {
  const std::int64_t dvp = job.dim_v_padded;
  const TileBounds bounds = begin_tile(job);
  for (std::int64_t kb = job.block_begin; kb < job.block_end; ++kb) {
    scores_block(job, static_cast<const float*>(job.k_packed) + kb * job.dim * kBlockK);
    softmax_block(job, bounds, kb * kBlockK);
    if (job.dropout != nullptr) {  // the sums above are taken before dropout
      dropout_factors(*job.dropout, job.batch, job.head, job.row0, job.rows, kb * kBlockK,
                      job.keep);
      apply_factors(job.keep, job.rows, job.scores);
    }
    accumulate_block(job, static_cast<const float*>(job.v_packed) + kb * kBlockK * dvp);
  }
  finish_tile(job);
}

}  // namespace
}  // namespace tileattn::detail::TILEATTN_ISA_NAMESPACE

namespace tileattn::detail {
TileKernel TILEATTN_KERNEL_GETTER() {
  return &TILEATTN_ISA_NAMESPACE::attend_tile;
}
}  // namespace tileattn::detail
