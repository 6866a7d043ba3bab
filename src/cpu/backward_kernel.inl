// The compute kernel of the CPU flash backward (FlashAttention-2's algorithm) for one query tile
// against one key block:
//   S = Q K^T, P = exp2(S * scale * log2 e - lse * log2 e)   (the forward's probabilities)
//   dP = dO V^T,  dS = P o (dP - delta)                      (delta = rowsum(dO o O))
//   dV += P^T dO,  dK += dS^T Q,  dQ += dS K                 (scale applied by the driver)
// with softcap's derivative folded into dS and dropout's keep factors into P (for dV) and dP.
// Every product is one register-blocked micro-kernel with different strides.
//
// Compiled once per ISA (backward_*.cpp); TILEATTN_ISA_NAMESPACE and TILEATTN_BACKWARD_GETTER are
// set by the including file. Only raw pointers and the plain structs of backward_kernels.hpp
// cross in.
#include <cstdint>
#include <utility>

#include "common/philox.hpp"
#include "cpu/backward_kernels.hpp"
#include "cpu/simd.hpp"
#include "cpu/tile_config.hpp"

namespace tileattn::detail::TILEATTN_ISA_NAMESPACE {
namespace {

#include "cpu/online_softmax.inl"
// After online_softmax.inl: it uses kLanes and kBlockK.
#include "cpu/dropout_block.inl"

constexpr std::int64_t kBlockQ = cpu_backward_config().block_q;
static_assert(cpu_backward_config().block_k == kBlockK, "the backward shares the score code");
static_assert(cpu_backward_config().d_align % kLanes == 0, "padded rows hold whole vectors");

// Register blocking (Rows x Vecs accumulators): S and dP in 32-key panels so that one panel of
// K^T or V^T stays in L1 next to the Q^T tile; the three gradient products in 6-row chunks.
constexpr int kScoreRows = static_cast<int>(f32_bwd_group_rows(kLanes)), kScoreVecs = 2;
constexpr int kGradRows = 6, kGradVecs = kLanes == 16 ? 4 : 2;

template <int Rows, int Vecs, std::int64_t StrideM, bool Accumulate>
inline void product_micro_impl(const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                               std::int64_t depth, float* c, std::int64_t ldc) {
  if (depth < 1) {  // apart, so that g++ keeps the accumulators below in registers
    if constexpr (!Accumulate)
      for (int r = 0; r < Rows; ++r)
        for (int v = 0; v < Vecs; ++v) store(c + r * ldc + v * kLanes, zero());
    return;
  }
  VecF acc[Rows][Vecs];
  for (int r = 0; r < Rows; ++r)
    for (int v = 0; v < Vecs; ++v) acc[r][v] = Accumulate ? load(c + r * ldc + v * kLanes) : zero();
  for (std::int64_t k = 0; k < depth; ++k, a += lda, b += ldb) {
    VecF bv[Vecs];
    for (int v = 0; v < Vecs; ++v) bv[v] = load(b + v * kLanes);
    for (int r = 0; r < Rows; ++r) {
      const VecF x = splat(a[r * StrideM]);
      for (int v = 0; v < Vecs; ++v) acc[r][v] = fma(x, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < Rows; ++r)
    for (int v = 0; v < Vecs; ++v) store(c + r * ldc + v * kLanes, acc[r][v]);
}

// c[m][n] (+)= sum_k A(m, k) b[k][n] for m < Rows and Vecs vectors of n, with
// A(m, k) = a[m * StrideM + k * lda]. `accumulate` is a template argument below: with a run-time
// choice between loading and zeroing, g++ builds the accumulators through the stack.
template <int Rows, int Vecs, std::int64_t StrideM>
inline void product_micro(const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                          std::int64_t depth, float* c, std::int64_t ldc, bool accumulate) {
  if (accumulate)
    product_micro_impl<Rows, Vecs, StrideM, true>(a, lda, b, ldb, depth, c, ldc);
  else
    product_micro_impl<Rows, Vecs, StrideM, false>(a, lda, b, ldb, depth, c, ldc);
}

// The product over m < M and columns [n0, N) (N a multiple of kLanes): panels of Vecs vectors
// outermost, so that one panel of b stays in L1 across the row chunks; narrower panels for the
// remainder. Grouped: a holds groups of Rows rows, each [depth][Rows] (A(m, k) =
// a[(m / Rows) * Rows * depth + k * Rows + m % Rows], lda = Rows, StrideM = 1).
template <int Rows, int Vecs, std::int64_t StrideM, bool Grouped = false>
void product(const float* a, std::int64_t lda, const float* b, std::int64_t ldb, std::int64_t depth,
             float* c, std::int64_t ldc, std::int64_t M, std::int64_t N, bool accumulate,
             std::int64_t n0 = 0) {
  static_assert(!Grouped || StrideM == 1);
  const auto rows_at = [&](std::int64_t m0) { return a + m0 * (Grouped ? depth : StrideM); };
  for (; n0 + Vecs * kLanes <= N; n0 += Vecs * kLanes) {
    std::int64_t m0 = 0;
    for (; m0 + Rows <= M; m0 += Rows)
      product_micro<Rows, Vecs, StrideM>(rows_at(m0), lda, b + n0, ldb, depth, c + m0 * ldc + n0,
                                         ldc, accumulate);
    if (m0 < M)
      with_rows<Rows - 1>(M - m0, [&]<int R>() {
        product_micro<R, Vecs, StrideM>(rows_at(m0), lda, b + n0, ldb, depth, c + m0 * ldc + n0,
                                        ldc, accumulate);
      });
  }
  if constexpr (Vecs > 1)
    if (n0 < N)
      product<Rows, Vecs / 2, StrideM, Grouped>(a, lda, b, ldb, depth, c, ldc, M, N, accumulate,
                                                n0);
}

// Turns the raw dot products in step.probs into the forward's probabilities P (before dropout),
// and records softcap's derivative 1 - tanh^2 when it is on.
void probabilities(const BackwardStep& step) {
  const TileJob& job = step.mods;
  const bool capped = job.softcap > 0.0f;
  const bool plain = step.interior && !capped && job.alibi_slope == 0.0f && job.scale_log2 > 0.0f &&
                     job.bool_mask == nullptr && job.additive_mask == nullptr;
  const float two_log2e_over_cap = capped ? 2.0f * kLog2e / job.softcap : 0.0f;
  const VecF one = splat(1.0f), inv_cap = splat(capped ? 1.0f / job.softcap : 0.0f);
  for (std::int64_t r = 0; r < step.rows; ++r) {
    float* row = step.probs + r * kBlockK;
    const VecF shift = splat(-step.lse_log2[r]);
    if (plain) {  // scale * log2(e) folded into the exponent's FMA
      const VecF scale_log2 = splat(job.scale_log2);
      for (std::int64_t c = 0; c < kBlockK; c += kLanes)
        store(row + c, exp2_nonpositive(fma(load(row + c), scale_log2, shift)));
      continue;
    }
    if (capped) {
      float* grad = step.softcap_grad + r * kBlockK;
      for (std::int64_t c = 0; c < kBlockK; c += kLanes) {
        const VecF t =
            mul(softcap(mul(load(row + c), splat(job.scale)), job.softcap, two_log2e_over_cap),
                inv_cap);  // tanh(scale * s / cap)
        store(grad + c, sub(one, mul(t, t)));
      }
    }
    modify_row(job, r, step.key0, !step.interior, row);
    for (std::int64_t c = 0; c < kBlockK; c += kLanes)
      store(row + c, exp2_nonpositive(add(load(row + c), shift)));
  }
}

// dprobs: dO V^T -> dS = P o (dP o keep - delta) [o softcap']; with dropout, dropped = P o keep.
void score_gradients(const BackwardStep& step) {
  const bool dropout = step.mods.dropout != nullptr, capped = step.mods.softcap > 0.0f;
  if (dropout)
    dropout_factors(*step.mods.dropout, step.mods.batch, step.mods.head, step.mods.row0, step.rows,
                    step.key0, step.dropped);
  for (std::int64_t r = 0; r < step.rows; ++r) {
    const VecF delta = splat(step.delta[r]);
    const std::int64_t row = r * kBlockK;
    for (std::int64_t c = row; c < row + kBlockK; c += kLanes) {
      const VecF prob = load(step.probs + c);
      VecF dprob = load(step.dprobs + c);
      if (dropout) {
        const VecF keep = load(step.dropped + c);
        dprob = mul(dprob, keep);
        store(step.dropped + c, mul(prob, keep));
      }
      VecF ds = mul(prob, sub(dprob, delta));
      if (capped) ds = mul(ds, load(step.softcap_grad + c));
      store(step.dprobs + c, ds);
    }
  }
}

void backward_step(const BackwardStep& step) {
  const std::int64_t rows = step.rows, dp = step.dim_padded, dvp = step.dim_v_padded;
  // S = Q K^T and dO V^T, [rows][block_k].
  if (step.q_group != kScoreRows) __builtin_trap();  // the driver's packing (tile_config.hpp)
  product<kScoreRows, kScoreVecs, 1, true>(step.q_t, kScoreRows, step.k_t, kBlockK, step.dim,
                                           step.probs, kBlockK, rows, kBlockK, false);
  product<kScoreRows, kScoreVecs, 1, true>(step.dout_t, kScoreRows, step.v_t, kBlockK, step.dim_v,
                                           step.dprobs, kBlockK, rows, kBlockK, false);
  probabilities(step);
  score_gradients(step);
  if (step.dk != nullptr) {
    // dV += P^T dO and dK += dS^T Q, [block_k][Dv or D]: A(m = key, k = row) = P[row][key].
    const float* p_kept = step.mods.dropout != nullptr ? step.dropped : step.probs;
    product<kGradRows, kGradVecs, 1>(p_kept, kBlockK, step.dout_rows, dvp, rows, step.dv, dvp,
                                     kBlockK, dvp, true);
    product<kGradRows, kGradVecs, 1>(step.dprobs, kBlockK, step.q_rows, dp, rows, step.dk, dp,
                                     kBlockK, dp, true);
  }
  // dQ += dS K, [rows][D]: A(m = row, k = key) = dS[row][key].
  if (step.dq != nullptr) {
    if (step.dq_gate != nullptr) step.dq_gate(step.dq_gate_arg, true);
    product<kGradRows, kGradVecs, kBlockK>(step.dprobs, 1, step.k_rows, dp, kBlockK, step.dq, dp,
                                           rows, dp, true);
    if (step.dq_gate != nullptr) step.dq_gate(step.dq_gate_arg, false);
  }
}

}  // namespace
}  // namespace tileattn::detail::TILEATTN_ISA_NAMESPACE

namespace tileattn::detail {
BackwardKernel TILEATTN_BACKWARD_GETTER() {
  return &TILEATTN_ISA_NAMESPACE::backward_step;
}
}  // namespace tileattn::detail
