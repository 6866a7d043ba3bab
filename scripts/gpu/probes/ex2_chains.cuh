// The exponential chains both MUFU probes time: 16 independent chains x = ex2(x) - 1 per thread
// (one MUFU.EX2 and one FADD per element; x stays in [-1, 0]).
#pragma once

inline constexpr int kEx2Chains = 16;

__device__ __forceinline__ float ex2_approx_ftz(float x) {
  float y;
  asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Runs `iters` rounds of the chains and returns the clocks they took; writes to `sink` only
// if the result is impossible, so that the compiler keeps the work.
__device__ __forceinline__ long long timed_ex2_chains(int iters, float seed, float* sink) {
  float x[kEx2Chains];
#pragma unroll
  for (int c = 0; c < kEx2Chains; ++c) x[c] = -seed * (c + 1) / kEx2Chains;
  const long long t0 = clock64();
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int c = 0; c < kEx2Chains; ++c) x[c] = ex2_approx_ftz(x[c]) - 1.0f;
  }
  const long long t1 = clock64();
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < kEx2Chains; ++c) s += x[c];
  if (s == 12345.0f) sink[threadIdx.x] = s;
  return t1 - t0;
}

// Host side: the SM count and the probes' device buffers (a sink for kept results, and
// `slots_per_sm` clock slots per SM).
struct ProbeBuffers {
  int sms = 0;
  float* sink = nullptr;
  long long* clocks = nullptr;
};
inline ProbeBuffers probe_buffers(int slots_per_sm) {
  ProbeBuffers b;
  cudaDeviceGetAttribute(&b.sms, cudaDevAttrMultiProcessorCount, 0);
  cudaMalloc(&b.sink, 1024 * sizeof(float));
  cudaMalloc(&b.clocks, b.sms * slots_per_sm * sizeof(long long));
  return b;
}
