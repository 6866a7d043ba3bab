// A packed variable-length batch (cu_seqlens) for the tests: random q, k, v with NaN canaries
// between rows and heads (unless `contiguous`) and in the keys behind key_lengths (seqused_k),
// outputs for every gradient, and each sequence as a batch of one with the same options.
// Shared by tests/cpu/test_varlen.cpp and the CUDA suite.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "attention_case.hpp"

namespace tileattn::test {

struct VarlenCase {
  std::string name;
  std::vector<std::int64_t> len_q, len_k;  // per sequence
  std::int64_t Hq = 4, Hkv = 2, D = 40, Dv = 40;
  bool causal = false;
  Alignment alignment = Alignment::bottom_right;
  std::int64_t window_left = -1, window_right = -1;
  bool seqused_k = false;  // key_lengths: a random count in [0, len_k] per sequence
  float softcap = 0.0f;
  bool alibi = false;  // [B, Hq] slopes
  float dropout = 0.0f;
  bool contiguous = false;  // packed rows without canary gaps (16-byte aligned rows for D % 8 == 0)
  bool poison_unused_keys = true;  // NaN in K and V behind key_lengths (else random values)
};

void PrintTo(const VarlenCase& c, std::ostream* os);

std::vector<std::int32_t> offsets(const std::vector<std::int64_t>& lens);

// A packed [total, H, D] operand: contiguous, or with NaN-canary gaps between rows and heads.
HostTensor packed(DType dtype, std::int64_t total, std::int64_t H, std::int64_t D,
                  bool contiguous = false);

// A [1, n, H, D] operand in the layout `packed` gives (so that a sequence alone meets the same
// kernels as in the batch), and rows [first, first + n) of a packed operand copied into one.
HostTensor alone_operand(DType dtype, std::int64_t n, std::int64_t H, std::int64_t D,
                         bool contiguous);
HostTensor slice_rows(const HostTensor& t, std::int64_t first, std::int64_t n, bool contiguous);

struct VarlenProblem {
  const VarlenCase& c;
  DType dtype;
  std::int64_t B, total_q, total_k;
  std::vector<std::int32_t> cu_q, cu_k;
  std::vector<std::int32_t> used;  // key_lengths
  std::vector<float> slopes;       // [B, Hq]
  HostTensor q, k, v, out, lse, dout, dq, dk, dv;
  std::uint64_t seed, offset;

  VarlenProblem(const VarlenCase& vc, DType dt, Rng& rng);

  std::int64_t max_q() const;
  std::int64_t max_k() const;
  void options(AttentionBackwardArgs& a) const;
  // Host views of every tensor (cu_seqlens, key_lengths and slopes included).
  AttentionBackwardArgs varlen_args();
};

// Sequence b alone: copies of its rows, a batch of one with the same options.
struct SequenceCall {
  HostTensor q, k, v, out, lse, dout, dq, dk, dv;
  std::int32_t used;
  std::vector<float> slopes;
  AttentionBackwardArgs args;

  SequenceCall(const VarlenProblem& p, std::int64_t b);
};

// Packed rows [first, first + n) of `packed_t` equal the contiguous `alone` bit for bit
// (tolerance 0), or within |got - want| <= atol + rtol |want|; NaN equals NaN.
void expect_rows_equal(const char* what, std::int64_t b, const HostTensor& packed_t,
                       std::int64_t first, const HostTensor& alone, float atol = 0.0f,
                       float rtol = 0.0f);

// The lse of sequence b ([Hq, total_q] packed against [1, Hq, n] alone), the same way.
void expect_lse_equal(const VarlenProblem& p, std::int64_t b, const HostTensor& alone_lse,
                      float atol = 0.0f);

// The suite's cases: every option that applies per sequence, lengths 0 and 1, lengths that fill
// no block, Lq != Lk.
std::vector<VarlenCase> varlen_cases();

}  // namespace tileattn::test
