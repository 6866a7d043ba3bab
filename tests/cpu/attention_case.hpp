// One CPU-vs-reference attention check: builds fresh random inputs for a Case, runs the
// double-precision reference (f32 out), the naive same-precision implementation (the error bar
// for 16-bit storage) and the CPU flash kernel on poisoned outputs, and checks the result.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace tileattn::test {

enum class MaskKind : std::uint8_t {
  none,
  bool_2d,           // boolean [Lq, Lk], broadcast over batch and heads
  bool_3d,           // boolean [Hq, Lq, Lk], broadcast over batch
  bool_batch,        // boolean [B, 1, Lq, Lk], broadcast over heads
  bool_full,         // boolean [B, Hq, Lq, Lk]
  bool_stride0,      // boolean [B, Hq, Lq, Lk] with stride 0 on B and Hq
  bool_key_padding,  // boolean [B, 1, 1, Lk]
  additive_2d,       // f32 [Lq, Lk] with -inf entries and a fully masked row
  additive_full,     // f32 [B, Hq, Lq, Lk] with -inf entries and a fully masked row
};
enum class KeyLengths : std::uint8_t { none, i32, i64 };
enum class Alibi : std::uint8_t { none, heads, batch_heads };
enum class OutDType : std::uint8_t { same, f32, bf16 };

struct Case {
  std::string name;
  std::int64_t B = 1, Lq = 32, Lk = 32, Hq = 2, Hkv = 2, D = 32, Dv = 0;  // Dv 0: = D
  Layout layout = Layout::bshd;
  bool causal = false;
  Alignment alignment = Alignment::bottom_right;
  std::int64_t window_left = -1, window_right = -1;
  MaskKind mask = MaskKind::none;
  KeyLengths key_lengths = KeyLengths::none;
  float softcap = 0.0f;
  Alibi alibi = Alibi::none;
  bool lse = true;
  float scale = 0.0f;
  OutDType out = OutDType::same;
  float dropout = 0.0f;  // dropout_p; seed and offset are drawn per run
  // Key j scaled by 1 + key_ramp * j / Lk: scores grow along the keys, so a row's running
  // maximum keeps jumping from one key block to the next.
  float key_ramp = 0.0f;
  // Query row i scaled by 1 + query_ramp * i / Lq: each query block's scores on another scale,
  // so a kernel that carries anything from one tile's rows to the next (the sm90 forward's
  // guessed running max) meets guesses far too high and far too low.
  float query_ramp = 0.0f;
  int threads = 2;
  bool large = false;  // lengths shrink with TILEATTN_TEST_SCALE
};

inline void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

// A list of cases: add(name, tweak) applies `tweak` to a default Case; large cases shrink with
// TILEATTN_TEST_SCALE.
struct CaseList {
  std::vector<Case> cases;
  void add(const std::string& name, const std::function<void(Case&)>& tweak);
};

// Whether this machine supports the CPU level `isa`.
bool isa_supported(CpuIsa isa);

// Figures from one check, also printed as a "[ stats ]" line for the reports.
struct CaseResult {
  ErrorStats kernel, naive;
  LseStats kernel_lse, naive_lse;
};

// Fresh random inputs for one case: q, k, v ~ N(0, 1) in `dtype`, plus the optional tensors.
struct Problem {
  Problem(const Case& c, DType dtype, Rng& rng);
  // Poisoned outputs in the case's out dtype and layout (lse absent when the case has none).
  HostTensor make_out() const;
  HostTensor make_lse() const;
  AttentionArgs args(const HostTensor& out, const HostTensor* lse) const;

  Case c;
  DType dtype, out_dtype;
  std::int64_t Dv;
  HostTensor q, k, v, mask, key_lengths, alibi;
  std::uint64_t dropout_seed = 0, dropout_offset = 0;
};

// Runs the case on the CPU backend capped at `isa`, with q/k/v stored as `dtype`, and checks it
// against the reference with gtest assertions. Returns the figures.
CaseResult run_case(const Case& c, DType dtype, CpuIsa isa);

}  // namespace tileattn::test
