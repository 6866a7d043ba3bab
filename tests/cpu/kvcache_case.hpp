// A KV-cache attention problem for the tests (attention_with_kvcache): a random cache, contiguous
// (optionally through cache_batch_idx) or paged with a shuffled block table, NaN in every cache
// row no sequence holds (unwritten pages included), optional new keys, rotary tables, ALiBi and
// varlen queries; and its oracle: each sequence's keys gathered and rotated by the test's own
// RoPE into a dense batch-of-one call of the reference backend. Shared by the CPU and CUDA suites.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "attention_case.hpp"

namespace tileattn::test {

struct KvCase {
  std::string name;
  std::vector<std::int64_t> cache_len;  // keys in the cache per sequence, before the append
  std::vector<std::int64_t> len_q;      // query rows per sequence (all equal unless varlen)
  std::int64_t len_new = 0;             // new keys per sequence (varlen: per sequence below)
  std::vector<std::int64_t> len_new_varlen;
  bool varlen = false;
  std::int64_t Hq = 8, Hkv = 2, D = 64, Dv = 64;
  std::int64_t block_size = 0;  // 0: contiguous cache
  bool batch_idx = false;       // contiguous: sequences use shuffled cache entries
  std::int64_t rotary_dim = 0;  // 0: no rotary
  bool interleaved = false;
  bool causal = false;
  std::int64_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  bool alibi = false;
  int num_splits = 0;
  // Left padding per sequence (cache_leftpad; empty: none): keys below are not attended, and
  // the test poisons them with NaN.
  std::vector<std::int64_t> leftpad;
};

void PrintTo(const KvCase& c, std::ostream* os);

struct KvProblem {
  KvCase c;
  DType dtype;
  std::int64_t B = 0, capacity = 0;
  // The cache before the call (a copy is kept to build the oracle and check the append).
  HostTensor q, k_cache, v_cache, k_new, v_new, cos, sin, out, lse;
  HostTensor k_cache_before, v_cache_before;
  std::vector<std::int32_t> seqlens, leftpad, block_table, batch_idx, cu_q, cu_new;
  std::vector<float> slopes;  // [B, Hq]

  KvProblem(const KvCase& kc, DType dt, Rng& rng, DType out_dtype = DType::f32);

  std::int64_t new_count(std::int64_t b) const;
  std::int64_t query_rows(std::int64_t b) const;
  std::int64_t first_query_row(std::int64_t b) const;
  std::int64_t first_new_row(std::int64_t b) const;
  // Where key j of sequence b lives in the cache: logical row index of [blocks, rows].
  std::int64_t cache_row(std::int64_t b, std::int64_t j) const;

  // Host views; the same problem with another layout of the same logical cache is `relaid`.
  KvCacheArgs args();

  // The expected out (logical, f32) and lse ([B, Hq, Lq] or [Hq, total_q]) from the oracle.
  void expected(std::vector<float>& out, std::vector<float>& lse) const;

  // The key (after the append and rotation) the cache should hold at key j of sequence b,
  // head h: the test's own f32 RoPE, rounded to the dtype.
  std::vector<float> expected_key(std::int64_t b, std::int64_t j, std::int64_t h) const;
};

// The test's RoPE: pair i of x (interleaved or half-split) rotated by cos/sin row `pos`, in
// f32 as documented, independently of the library.
void rope_f32(float* x, std::int64_t rotary_dim, bool interleaved, const HostTensor& cos,
              const HostTensor& sin, std::int64_t pos);

// out (f32 out: relative L2 within tol_f32_out, else tol_16bit_out) and lse (max abs lse_tol)
// against the oracle; no non-finite value, no write outside out's logical elements.
void expect_matches_oracle(const KvProblem& p, double tol_f32_out, double tol_16bit_out,
                           double lse_tol);

// The append wrote exactly each sequence's new rows (keys rotated by the test's RoPE, values as
// given) and left every other byte of both caches as it was.
void expect_append_exact(const KvProblem& p);

}  // namespace tileattn::test
