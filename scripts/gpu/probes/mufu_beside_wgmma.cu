// The MUFU.EX2 rate of one warpgroup while another warpgroup of the same CTA streams wgmmas
// (docs/perf/gpu.md, session 27: the D 64 forward's softmax took ~2x its MUFU time beside the
// other warpgroup's GEMMs). One CTA per SM, 256 threads: warpgroup 1 runs 16 independent
// chains x = ex2(x) - 1 per thread and times them; warpgroup 0 is idle (mode 0), or streams
// m64n128k16 wgmmas with both operands in shared memory, like the forward's S (mode 1), or
// m64n64k16 wgmmas with A from registers, like its P V at D 64 (mode 2), or the same shape with
// both operands in shared memory (mode 3), two groups in flight.
//   nvcc -O3 -gencode arch=compute_90a,code=sm_90a -Isrc -std=c++20 --expt-relaxed-constexpr \
//     -o /tmp/mufu_wgmma scripts/gpu/probes/mufu_beside_wgmma.cu
//   /tmp/mufu_wgmma
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "cuda/sm90/async.cuh"
#include "cuda/sm90/wgmma.cuh"
#include "ex2_chains.cuh"

using namespace tileattn::cuda;

template <int kMode>
__global__ void __launch_bounds__(256, 1) probe(int mufu_iters, int gemm_groups, float* sink,
                                                long long* clocks) {
  extern __shared__ unsigned char smem_raw[];
  auto* base = reinterpret_cast<__nv_bfloat16*>(
      (reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull);
  __nv_bfloat16* a_tile = base;            // 64 x 64
  __nv_bfloat16* b_tile = base + 64 * 64;  // 128 x 64
  for (int i = threadIdx.x; i < 192 * 64; i += blockDim.x) base[i] = __float2bfloat16(0.001f);
  fence_proxy_async_shared();
  __syncthreads();
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    if constexpr (kMode == 0) return;
    const long long t0 = clock64();
    float acc[16][4] = {};
    std::uint32_t pa[8][4];
#pragma unroll
    for (int k = 0; k < 8; ++k)
#pragma unroll
      for (int e = 0; e < 4; ++e) pa[k][e] = 0x3c003c00u + k + e;
    for (int g = 0; g < gemm_groups; ++g) {
      wgmma_fence();
      if constexpr (kMode == 1) {
#pragma unroll
        for (int ks = 0; ks < 4; ++ks)
          wgmma_ss<__nv_bfloat16, 128>(acc, sw128_desc(a_tile + ks * 16, 16, 1024),
                                       sw128_desc(b_tile + ks * 16, 16, 1024), 1);
      } else if constexpr (kMode == 3) {
        auto& o = reinterpret_cast<float(&)[8][4]>(acc);
#pragma unroll
        for (int ks = 0; ks < 8; ++ks)
          wgmma_ss<__nv_bfloat16, 64>(o, sw128_desc(a_tile + (ks % 4) * 16, 16, 1024),
                                      sw128_desc(b_tile + (ks % 4) * 16, 16, 1024), 1);
      } else {
        auto& o = reinterpret_cast<float(&)[8][4]>(acc);
#pragma unroll
        for (int ks = 0; ks < 8; ++ks)
          wgmma_rs<__nv_bfloat16, 64>(o, pa[ks], sw128_desc(b_tile + ks * 16 * 64, 128 * 128, 1024));
      }
      wgmma_commit();
      wgmma_wait<1>();
    }
    wgmma_wait<0>();
    fence_operand(acc);
    const long long t1 = clock64();
    if (acc[0][0] == 12345.0f) sink[threadIdx.x] = acc[1][1];
    if (threadIdx.x == 0) clocks[blockIdx.x * 8 + 7] = t1 - t0;
    return;
  }
  const long long t = timed_ex2_chains(mufu_iters, 0.5f, sink);
  if (threadIdx.x % 32 == 0) clocks[blockIdx.x * 8 + (threadIdx.x - 128) / 32] = t;
}

int main() {
  const auto [sms, sink, clocks] = probe_buffers(8);
  const int smem = 64 * 1024;
  const int mufu_iters = 4096, gemm_groups = 6000;
  auto run = [&](auto kernel, const char* name) {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    cudaMemset(clocks, 0, sms * 8 * sizeof(long long));
    kernel<<<sms, 256, smem>>>(mufu_iters, gemm_groups, sink, clocks);
    kernel<<<sms, 256, smem>>>(mufu_iters, gemm_groups, sink, clocks);
    cudaDeviceSynchronize();
    std::vector<long long> c(sms * 8);
    cudaMemcpy(c.data(), clocks, c.size() * sizeof(long long), cudaMemcpyDeviceToHost);
    std::vector<double> mufu, gemm;
    for (int b = 0; b < sms; ++b) {
      for (int w = 0; w < 4; ++w) mufu.push_back(static_cast<double>(c[b * 8 + w]) / (mufu_iters * kEx2Chains));
      gemm.push_back(static_cast<double>(c[b * 8 + 7]));
    }
    std::sort(mufu.begin(), mufu.end());
    std::sort(gemm.begin(), gemm.end());
    std::printf("%-34s clocks per MUFU.EX2 per warp: median %.2f (min %.2f max %.2f); "
                "MUFU loop %.0f clocks, wgmma stream %.0f clocks (%s)\n",
                name, mufu[mufu.size() / 2], mufu.front(), mufu.back(),
                mufu[mufu.size() / 2] * mufu_iters * kEx2Chains, gemm[gemm.size() / 2],
                cudaGetErrorString(cudaGetLastError()));
  };
  run(probe<0>, "alone");
  run(probe<1>, "beside SS m64n128k16 (S)");
  run(probe<2>, "beside RS m64n64k16 (P V, D 64)");
  run(probe<3>, "beside SS m64n64k16 (P V from smem)");
  return 0;
}
