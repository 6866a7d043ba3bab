// Measures the MUFU.EX2 issue rate of one SM sub-partition (clocks per warp instruction) with
// 1..8 warps per sub-partition, each warp running 16 independent chains x = ex2(x) - 1 (one
// MUFU and one FADD per element; x stays in [-1, 0]). One CTA per SM. Prints, per warp count,
// the median over warps of clocks per MUFU instruction of that warp.
//   nvcc -O3 -arch=sm_90a -o /tmp/mufu_rate scripts/gpu/probes/mufu_rate.cu && /tmp/mufu_rate
// H200, 1980 MHz (docs/perf/gpu.md, session 27): 8.5 / 16.1 / 23.9 / 32.0 / 63.8 clocks with
// 1 / 2 / 3 / 4 / 8 warps, i.e. 4 lanes per clock per sub-partition.
#include <cstdio>
#include <vector>
#include <algorithm>

#include "ex2_chains.cuh"

__global__ void mufu_kernel(int iters, float seed, float* sink, long long* clocks) {
  __syncthreads();
  const long long t = timed_ex2_chains(iters, seed, sink);
  if (threadIdx.x % 32 == 0) clocks[blockIdx.x * 32 + threadIdx.x / 32] = t;
}

int main() {
  const auto [sms, sink, clocks] = probe_buffers(32);
  const int iters = 4096;
  for (int warps_per_smsp : {1, 2, 3, 4, 8}) {
    const int threads = 128 * warps_per_smsp;
    mufu_kernel<<<sms, threads>>>(iters, 0.5f, sink, clocks);  // warm-up
    mufu_kernel<<<sms, threads>>>(iters, 0.5f, sink, clocks);
    cudaDeviceSynchronize();
    std::vector<long long> c(sms * 32);
    cudaMemcpy(c.data(), clocks, c.size() * sizeof(long long), cudaMemcpyDeviceToHost);
    std::vector<double> per;
    for (int b = 0; b < sms; ++b)
      for (int w = 0; w < threads / 32; ++w)
        per.push_back(static_cast<double>(c[b * 32 + w]) / (iters * kEx2Chains));
    std::sort(per.begin(), per.end());
    std::printf("warps per sub-partition %d: clocks per MUFU.EX2 per warp: median %.2f (min %.2f, max %.2f)"
                " -> sub-partition rate %.2f lanes/clock\n",
                warps_per_smsp, per[per.size() / 2], per.front(), per.back(),
                32.0 * warps_per_smsp / per[per.size() / 2]);
  }
  std::printf("%s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
