// The machine's f32 FMA peak, measured: every thread runs independent FMA chains (enough of them
// to cover the FMA latency on two ports) for a fixed time, split in five windows of which the
// best counts. The ceiling the bench reports the flash kernel against.
#pragma once

namespace tileattn::bench {

struct FmaPeak {
  double gflops = 0.0;       // f32 FLOP/s / 1e9, one FMA = 2 FLOPs
  const char* isa = "none";  // "avx512f", "avx2+fma" or "scalar"
  int threads = 1;
};

FmaPeak measure_fma_peak(int threads, double seconds = 0.3);

}  // namespace tileattn::bench
