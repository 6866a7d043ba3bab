#include "fma_peak.hpp"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "common/threads.hpp"

namespace tileattn::bench {
namespace {

// 12 independent accumulators: 2 FMA ports × 4-cycle latency needs at least 8 in flight.
constexpr int kChains = 12;
constexpr std::int64_t kChunk = 1 << 16;  // iterations between clock reads

__attribute__((target("avx512f"))) float fma_chunk_avx512() {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c) * 0.01f);
  const __m512 mul = _mm512_set1_ps(0.999f), add = _mm512_set1_ps(0.001f);
  for (std::int64_t it = 0; it < kChunk; ++it) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], mul, add);
  }
  __m512 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  return lanes[0] + lanes[15];
}

__attribute__((target("avx2,fma"))) float fma_chunk_avx2() {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(static_cast<float>(c) * 0.01f);
  const __m256 mul = _mm256_set1_ps(0.999f), add = _mm256_set1_ps(0.001f);
  for (std::int64_t it = 0; it < kChunk; ++it) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], mul, add);
  }
  __m256 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm256_add_ps(sum, acc[c]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  return lanes[0] + lanes[7];
}

float fma_chunk_scalar() {
  float acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = static_cast<float>(c) * 0.01f;
  for (std::int64_t it = 0; it < kChunk; ++it)
    for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * 0.999f + 0.001f;
  float sum = 0.0f;
  for (int c = 0; c < kChains; ++c) sum += acc[c];
  return sum;
}

}  // namespace

FmaPeak measure_fma_peak(int threads, double seconds) {
  FmaPeak peak;
  peak.threads = detail::resolve_threads(threads);
  float (*chunk)() = fma_chunk_scalar;
  int lanes = 1;
  peak.isa = "scalar";
  if (__builtin_cpu_supports("avx512f")) {
    chunk = fma_chunk_avx512, lanes = 16, peak.isa = "avx512f";
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    chunk = fma_chunk_avx2, lanes = 8, peak.isa = "avx2+fma";
  }

  using clock = std::chrono::steady_clock;
  volatile float sink = 0.0f;
  for (int i = 0; i < 4; ++i) sink = sink + chunk();  // warm up (clocks, AVX-512 licence)
  // The best of several short windows: robust to other processes taking a core for a moment.
  constexpr int kWindows = 5;
  for (int window = 0; window < kWindows; ++window) {
    std::atomic<std::int64_t> chunks{0};
    const auto start = clock::now();
#pragma omp parallel num_threads(peak.threads)
    {
      std::int64_t mine = 0;
      float local = 0.0f;
      while (std::chrono::duration<double>(clock::now() - start).count() < seconds / kWindows) {
        local += chunk();
        ++mine;
      }
      chunks += mine;
      if (local == 12345.0f) sink = local;  // keeps the work observable
    }
    const double elapsed = std::chrono::duration<double>(clock::now() - start).count();
    const double flops = static_cast<double>(chunks.load()) * kChunk * kChains * lanes * 2.0;
    peak.gflops = std::max(peak.gflops, flops / elapsed / 1e9);
  }
  return peak;
}

}  // namespace tileattn::bench
