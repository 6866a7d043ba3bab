// When a warpgroup's wgmma issue returns and when its groups complete, for the D 64 forward's
// key-block step (docs/perf/gpu.md, session 34): S = 4 x m64n128k16 (both operands in shared
// memory) and P V = 8 x m64n64k16 (A from registers). One CTA per SM, 256 threads; warpgroup 0
// runs `iters` steps from an empty pipeline, lane 0 of its warp 0 stamping clock64() after each
// commit and wait; warpgroup 1 is idle (busy 0) or runs exponential chains meanwhile (busy 1),
// as the other warpgroup's softmax does. Variants (the order of one step):
//   0 main      S, P V; wait S (1); wait P V (0)
//   1 S only    S; wait
//   2 PV only   P V; wait
//   3 split     S_a (n 0..63), S_b (n 64..127), P V; wait S_a (2), S_b (1), P V (0)
//   4 S_a PV S_b  S_a, P V, S_b; wait S_a (2), P V (1), S_b (0)
//   5 main, a stamp after every wgmma instruction (12) and after the waits
//   nvcc -O3 -gencode arch=compute_90a,code=sm_90a -Isrc -std=c++20 --expt-relaxed-constexpr \
//     -o /tmp/wgmma_issue scripts/gpu/probes/wgmma_issue.cu && /tmp/wgmma_issue
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "cuda/sm90/async.cuh"
#include "cuda/sm90/wgmma.cuh"
#include "ex2_chains.cuh"

using namespace tileattn::cuda;

inline constexpr int kIters = 32, kStamps = 16;

template <int kVariant, bool kBusy>
__global__ void __launch_bounds__(256, 1) probe(float* sink, long long* stamps) {
  extern __shared__ unsigned char smem_raw[];
  auto* base = reinterpret_cast<__nv_bfloat16*>(
      (reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull);
  __nv_bfloat16* q_tile = base;            // 64 x 64
  __nv_bfloat16* k_tile = base + 64 * 64;  // 128 x 64
  __nv_bfloat16* v_tile = k_tile + 128 * 64;  // 128 x 64
  for (int i = threadIdx.x; i < 320 * 64; i += blockDim.x) base[i] = __float2bfloat16(0.001f);
  fence_proxy_async_shared();
  __syncthreads();
  if (threadIdx.x >= 128) {
    if constexpr (kBusy) timed_ex2_chains(600, 0.5f, sink);
    return;
  }
  float s[16][4];
  float acc_o[8][4] = {};
  std::uint32_t pa[8][4];
#pragma unroll
  for (int k = 0; k < 8; ++k)
#pragma unroll
    for (int e = 0; e < 4; ++e) pa[k][e] = 0x3c003c00u + k + e;
  auto& s_a = reinterpret_cast<float(&)[8][4]>(s[0]);
  auto& s_b = reinterpret_cast<float(&)[8][4]>(s[8]);
  const bool stamping = threadIdx.x == 0;
  long long* out = stamps + static_cast<long long>(blockIdx.x) * kIters * kStamps;
  auto issue_s = [&] {
#pragma unroll
    for (int ks = 0; ks < 4; ++ks)
      wgmma_ss<__nv_bfloat16, 128>(s, sw128_desc(q_tile + ks * 16, 16, 1024),
                                   sw128_desc(k_tile + ks * 16, 16, 1024), ks > 0);
  };
  auto issue_half = [&](float (&h)[8][4], int half) {
#pragma unroll
    for (int ks = 0; ks < 4; ++ks)
      wgmma_ss<__nv_bfloat16, 64>(h, sw128_desc(q_tile + ks * 16, 16, 1024),
                                  sw128_desc(k_tile + half * 64 * 64 + ks * 16, 16, 1024), ks > 0);
  };
  auto issue_pv = [&] {
#pragma unroll
    for (int ks = 0; ks < 8; ++ks)
      wgmma_rs<__nv_bfloat16, 64>(acc_o, pa[ks], sw128_desc(v_tile + ks * 16 * 64, 128 * 128, 1024));
  };
  // Every accumulator's values are used after each step: ptxas removes wgmmas whose results
  // are dead (a first version lost S in "S only" and S_b in the split variants).
  float live = 0.0f;
  for (int it = 0; it < kIters; ++it) {
    long long t[kStamps];
#pragma unroll
    for (int i = 0; i < kStamps; ++i) t[i] = 0;
    int n = 0;
    auto stamp = [&] { t[n++] = clock64(); };
    auto wait_s_then_pv = [&] {  // main's order: S done (the older group), then P V
      wgmma_wait<1>();
      fence_operand(s);
      stamp();
      wgmma_wait<0>();
      fence_operand(acc_o);
      stamp();
    };
    fence_operand(acc_o);
    fence_operand(s);
    stamp();
    wgmma_fence();
    if constexpr (kVariant == 0) {
      issue_s();
      wgmma_commit();
      stamp();
      issue_pv();
      wgmma_commit();
      stamp();
      wait_s_then_pv();
    } else if constexpr (kVariant == 1) {
      issue_s();
      wgmma_commit();
      stamp();
      wgmma_wait<0>();
      fence_operand(s);
      stamp();
    } else if constexpr (kVariant == 2) {
      issue_pv();
      wgmma_commit();
      stamp();
      wgmma_wait<0>();
      fence_operand(acc_o);
      stamp();
    } else if constexpr (kVariant == 3) {
      issue_half(s_a, 0);
      wgmma_commit();
      stamp();
      issue_half(s_b, 1);
      wgmma_commit();
      stamp();
      issue_pv();
      wgmma_commit();
      stamp();
      wgmma_wait<2>();
      fence_operand(s_a);
      stamp();
      wgmma_wait<1>();
      fence_operand(s_b);
      stamp();
      wgmma_wait<0>();
      fence_operand(acc_o);
      stamp();
    } else if constexpr (kVariant == 4) {
      issue_half(s_a, 0);
      wgmma_commit();
      stamp();
      issue_pv();
      wgmma_commit();
      stamp();
      issue_half(s_b, 1);
      wgmma_commit();
      stamp();
      wgmma_wait<2>();
      fence_operand(s_a);
      stamp();
      wgmma_wait<1>();
      fence_operand(acc_o);
      stamp();
      wgmma_wait<0>();
      fence_operand(s_b);
      stamp();
    } else {
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        wgmma_ss<__nv_bfloat16, 128>(s, sw128_desc(q_tile + ks * 16, 16, 1024),
                                     sw128_desc(k_tile + ks * 16, 16, 1024), ks > 0);
        stamp();
      }
      wgmma_commit();
#pragma unroll
      for (int ks = 0; ks < 8; ++ks) {
        wgmma_rs<__nv_bfloat16, 64>(acc_o, pa[ks],
                                    sw128_desc(v_tile + ks * 16 * 64, 128 * 128, 1024));
        stamp();
      }
      wgmma_commit();
      wait_s_then_pv();
    }
    if (stamping) {
#pragma unroll
      for (int i = 0; i < kStamps; ++i) out[it * kStamps + i] = i < n ? t[i] - t[0] : -1;
    }
    live += s[0][0] + s[8][0] + s[15][3] + acc_o[7][3];
  }
  if (live == 12345.0f) sink[threadIdx.x] = live;
}

int main() {
  const auto [sms, sink, clocks] = probe_buffers(1);
  long long* stamps = nullptr;
  cudaMalloc(&stamps, static_cast<size_t>(sms) * kIters * kStamps * sizeof(long long));
  const int smem = 64 * 1024;
  auto run = [&](auto kernel, const char* name, const char* points) {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    kernel<<<sms, 256, smem>>>(sink, stamps);
    kernel<<<sms, 256, smem>>>(sink, stamps);
    cudaDeviceSynchronize();
    std::vector<long long> h(static_cast<size_t>(sms) * kIters * kStamps);
    cudaMemcpy(h.data(), stamps, h.size() * sizeof(long long), cudaMemcpyDeviceToHost);
    std::printf("%-22s %-58s", name, points);
    for (int i = 1; i < kStamps; ++i) {
      std::vector<long long> v;
      for (int b = 0; b < sms; ++b)
        for (int it = 4; it < kIters; ++it) {
          const long long x = h[(static_cast<size_t>(b) * kIters + it) * kStamps + i];
          if (x >= 0) v.push_back(x);
        }
      if (v.empty()) break;
      std::sort(v.begin(), v.end());
      std::printf(" %5lld", v[v.size() / 2]);
    }
    std::printf("  (%s)\n", cudaGetErrorString(cudaGetLastError()));
  };
  std::printf("clocks from the step's start (medians over SMs and steps 4..%d)\n", kIters - 1);
  for (int busy = 0; busy < 2; ++busy) {
    std::printf("-- other warpgroup %s\n", busy ? "running exponentials" : "idle");
    auto go = [&](auto v0, auto v1, auto v2, auto v3, auto v4, auto v5) {
      run(v0, "main", "S issued, PV issued, S done, PV done:");
      run(v1, "S only", "S issued, S done:");
      run(v2, "PV only", "PV issued, PV done:");
      run(v3, "split", "S_a, S_b, PV issued; S_a, S_b, PV done:");
      run(v4, "S_a PV S_b", "S_a, PV, S_b issued; S_a, PV, S_b done:");
      run(v5, "main per wgmma", "each of 4 S, 8 PV issued; S done, PV done:");
    };
    if (busy)
      go(probe<0, true>, probe<1, true>, probe<2, true>, probe<3, true>, probe<4, true>,
         probe<5, true>);
    else
      go(probe<0, false>, probe<1, false>, probe<2, false>, probe<3, false>, probe<4, false>,
         probe<5, false>);
  }
  return 0;
}
