// The serving modes of two subcommands, on attention_with_kvcache:
//   bench --decode (decode_bench.cpp): time per call and effective bandwidth (bytes of K and V
//     read per second) on a decode shape, next to a memory ceiling measured in the same run;
//   demo --decode (decode_demo.cpp): a decode loop over a paged cache, as a server runs it.
#pragma once

#include <cstdint>
#include <vector>

#include "options.hpp"

namespace tileattn::tools {

struct DecodeBench {
  // B, Hq, Hkv, D, Dv; Lq new query rows per sequence attending to Lk keys already in the cache;
  // dtype (of q and the cache), out_dtype, causal (none or bottom-right), window, softcap, scale,
  // backend, isa, threads, seed.
  Problem problem;
  std::int64_t block_size = 0;      // 0: contiguous cache; else paged, shuffled block table
  int num_splits = 0;               // KvCacheArgs::num_splits (0: the library decides)
  std::int64_t ceiling_mib = 1024;  // the memory ceiling's buffer
  int iters = 5, warmup = 1;
  double max_seconds = 120.0;
  bool json = false;
};
int bench_decode(DecodeBench& o);

struct DecodeDemo {
  Problem problem;  // Hq, Hkv, D, dtype, backend, isa, threads, seed
  std::vector<std::int64_t> prompt_lengths{37, 120, 250};  // one sequence per prompt
  int steps = 16;                                          // decode steps
  std::int64_t block_size = 16;                            // tokens per page
};
int demo_decode(DecodeDemo& o);

}  // namespace tileattn::tools
