// Times tileattn's CUDA forward on the FlashAttention-3 paper's grid: bf16, BSHD, head dim D in
// {64, 128, 256}, causal and not, sequence length L = 512..16384 with batch = 16384 / L and
// heads = 2048 / D (so every shape holds 16k tokens x 2048 channels). FLOPs = 4 B H L^2 D, halved
// for causal. Each figure is the median of --iters runs, each timed with its own pair of CUDA
// events after --warmup runs. Writes one JSON record per shape (--json) and prints a table.
// --backward 1 times attention_backward instead (out and lse from one forward call first; the
// call includes its preprocessing and dQ conversion kernels), counting 2.5x the forward FLOPs.
//
//   tileattn_gpu_bench [--dims 64,128,256] [--lengths 512,...,16384] [--iters 30] [--warmup 5]
//                      [--json out.json] [--label tileattn] [--backward 0|1] [--deterministic 0|1]
//                      [--cooldown-ms 500] [--sustain-ms 0]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "clock_sampler.hpp"
#include "common/float_convert.hpp"
#include "cuda/sm80/tile_config.hpp"
#include "cuda/sm90/tile_config.hpp"
#include "tileattn/tileattn.hpp"

namespace {

constexpr std::int64_t kTokens = 16384, kChannels = 2048;

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(status));
    std::exit(1);
  }
}

std::vector<int> parse_list(const char* text) {
  std::vector<int> values;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) values.push_back(std::stoi(item));
  return values;
}

// N(0,1)-ish bf16 values (sum of uniforms), never zeros: zeros time faster than real data.
double epoch_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void fill_random(std::vector<std::uint16_t>& host, std::uint64_t seed) {
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& h : host) {
    float sum = 0.0f;
    for (int r = 0; r < 4; ++r) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      sum += static_cast<float>(x >> 40) / static_cast<float>(1ull << 24);
    }
    h = tileattn::detail::f32_to_bf16((sum - 2.0f) * 1.7320508f);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> dims = {64, 128, 256};
  std::vector<int> lengths = {512, 1024, 2048, 4096, 8192, 16384};
  int iters = 30, warmup = 5;
  // The H200 caps its power at 700 W by lowering the SM clock, reacting to the recent average:
  // back-to-back shapes run hotter and slower than shapes with idle gaps. --cooldown-ms idles the
  // GPU before each shape (every shape starts from the same state); --sustain-ms runs the shape
  // for that long before timing it (the clock it settles at under the cap).
  int cooldown_ms = 500, sustain_ms = 0;
  std::string json_path, label = "tileattn";
  bool backward = false, deterministic = false;
  int causal_first = 0, causal_last = 1;  // --causal 0 | 1 | both (default)
  for (int a = 1; a + 1 < argc; a += 2) {
    const std::string flag = argv[a];
    if (flag == "--dims")
      dims = parse_list(argv[a + 1]);
    else if (flag == "--lengths")
      lengths = parse_list(argv[a + 1]);
    else if (flag == "--iters")
      iters = std::stoi(argv[a + 1]);
    else if (flag == "--warmup")
      warmup = std::stoi(argv[a + 1]);
    else if (flag == "--cooldown-ms")
      cooldown_ms = std::stoi(argv[a + 1]);
    else if (flag == "--sustain-ms")
      sustain_ms = std::stoi(argv[a + 1]);
    else if (flag == "--json")
      json_path = argv[a + 1];
    else if (flag == "--label")
      label = argv[a + 1];
    else if (flag == "--backward")
      backward = std::stoi(argv[a + 1]) != 0;
    else if (flag == "--deterministic")
      deterministic = std::stoi(argv[a + 1]) != 0;
    else if (flag == "--causal" && std::string(argv[a + 1]) != "both")
      causal_first = causal_last = std::stoi(argv[a + 1]) != 0 ? 1 : 0;
    else if (flag == "--causal")
      causal_first = 0, causal_last = 1;
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }

  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  tileattn_bench::ClockSampler clocks(0);
  if (clocks.available())
    std::printf("enforced power limit: %.0f W (clocks sampled by NVML during each shape)\n",
                clocks.power_limit_w());

  const std::size_t elems = static_cast<std::size_t>(kTokens * kChannels);
  std::vector<std::uint16_t> host(elems);
  void *q = nullptr, *k = nullptr, *v = nullptr, *out = nullptr, *dout = nullptr, *dq = nullptr,
       *dk = nullptr, *dv = nullptr, *lse = nullptr;
  for (void** p : {&q, &k, &v, &out}) check(cudaMalloc(p, elems * 2), "cudaMalloc");
  if (backward) {
    for (void** p : {&dout, &dq, &dk, &dv}) check(cudaMalloc(p, elems * 2), "cudaMalloc");
    // lse: [B, H, L] f32 = tokens x heads floats; at most tokens x 2048 / 64 heads.
    check(cudaMalloc(&lse, static_cast<std::size_t>(kTokens) * (kChannels / 64) * 4), "cudaMalloc");
  }
  int seed = 1;
  for (void* p : {q, k, v, backward ? dout : nullptr}) {
    if (p == nullptr) continue;
    fill_random(host, static_cast<std::uint64_t>(seed++));
    check(cudaMemcpy(p, host.data(), elems * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  cudaStream_t stream = nullptr;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");
  std::vector<cudaEvent_t> events(2 * static_cast<std::size_t>(iters));
  for (auto& e : events) check(cudaEventCreate(&e), "cudaEventCreate");

  std::ostringstream json;
  json << "[\n";
  bool first = true;
  std::printf("%5s %6s %6s %4s %4s %10s %9s  %s\n", "D", "causal", "L", "B", "H", "ms", "TFLOP/s",
              "kernel Br x Bc, warps, stages, mean SM clock, max power");
  for (int D : dims)
    for (int causal = causal_first; causal <= causal_last; ++causal)
      for (int L : lengths) {
        const std::int64_t B = kTokens / L, H = kChannels / D;
        tileattn::AttentionArgs args;
        args.q =
            tileattn::make_tensor(q, tileattn::DType::bf16, {B, L, H, D}, tileattn::Device::cuda);
        args.k =
            tileattn::make_tensor(k, tileattn::DType::bf16, {B, L, H, D}, tileattn::Device::cuda);
        args.v =
            tileattn::make_tensor(v, tileattn::DType::bf16, {B, L, H, D}, tileattn::Device::cuda);
        args.out =
            tileattn::make_tensor(out, tileattn::DType::bf16, {B, L, H, D}, tileattn::Device::cuda);
        args.causal = causal != 0;
        tileattn::Context ctx;
        ctx.backend = tileattn::Backend::cuda;
        ctx.cuda_stream = stream;
        tileattn::AttentionBackwardArgs bargs;
        if (backward) {
          args.lse =
              tileattn::make_tensor(lse, tileattn::DType::f32, {B, H, L}, tileattn::Device::cuda);
          tileattn::attention_forward(args, ctx);
          static_cast<tileattn::AttentionArgs&>(bargs) = args;
          const auto grad = [&](void* data) {
            return tileattn::make_tensor(data, tileattn::DType::bf16, {B, L, H, D},
                                         tileattn::Device::cuda);
          };
          bargs.dout = grad(dout);
          bargs.dq = grad(dq);
          bargs.dk = grad(dk);
          bargs.dv = grad(dv);
          bargs.deterministic = deterministic;
        }
        const auto run = [&] {
          if (backward)
            tileattn::attention_backward(bargs, ctx);
          else
            tileattn::attention_forward(args, ctx);
        };
        std::this_thread::sleep_for(std::chrono::milliseconds(cooldown_ms));
        const double t0 = epoch_seconds();
        for (int w = 0; w < warmup; ++w) run();
        while (epoch_seconds() - t0 < sustain_ms * 1e-3) {
          for (int r = 0; r < 4; ++r) run();
          check(cudaStreamSynchronize(stream), "sustain");
        }
        clocks.start();
        for (int i = 0; i < iters; ++i) {
          check(cudaEventRecord(events[2 * i], stream), "cudaEventRecord");
          run();
          check(cudaEventRecord(events[2 * i + 1], stream), "cudaEventRecord");
        }
        check(cudaStreamSynchronize(stream), "run");
        const tileattn_bench::ClockStats clock_stats = clocks.stop();
        std::vector<float> ms(static_cast<std::size_t>(iters));
        for (int i = 0; i < iters; ++i)
          check(cudaEventElapsedTime(&ms[i], events[2 * i], events[2 * i + 1]), "elapsed");
        std::sort(ms.begin(), ms.end());
        const double median = ms[ms.size() / 2];
        const double flops = 4.0 * static_cast<double>(B * H) * L * static_cast<double>(L) * D /
                             (causal ? 2.0 : 1.0) * (backward ? 2.5 : 1.0);
        const double tflops = flops / (median * 1e-3) / 1e12;
        // The kernel the dispatcher picks: sm90 (wgmma + TMA) on compute capability 9.0 for
        // 16-bit inputs (the backward: D <= 128) unless TILEATTN_CUDA_DISABLE_SM90=1, else sm80
        // (mma.sync).
        const int bucket = tileattn::cuda::head_dim_bucket(D);
        const char* disable = std::getenv("TILEATTN_CUDA_DISABLE_SM90");
        const bool sm90 = (!backward || D <= 128) && prop.major == 9 && prop.minor == 0 &&
                          !(disable != nullptr && std::strcmp(disable, "1") == 0);
        const auto cfg = tileattn::cuda::tile_config(bucket);
        const auto cfg90 = tileattn::cuda::sm90_tile_config(tileattn::cuda::sm90_bucket(D));
        const auto cfg_bwd = tileattn::cuda::bwd_tile_config(tileattn::cuda::bwd_bucket(D));
        const auto cfg90_bwd = tileattn::cuda::sm90_bwd_tile_config(tileattn::cuda::bwd_bucket(D));
        int block_m = cfg.block_m, block_n = cfg.block_n, warps = cfg.warps, stages = cfg.stages;
        if (backward && sm90)
          block_m = cfg90_bwd.block_m, block_n = cfg90_bwd.block_n,
          warps = cfg90_bwd.consumer_warp_groups * 4, stages = cfg90_bwd.stages;
        else if (backward)
          block_m = cfg_bwd.block_m, block_n = cfg_bwd.block_n(), warps = cfg_bwd.warps, stages = 2;
        else if (sm90)
          block_m = cfg90.block_m, block_n = cfg90.block_n, warps = cfg90.consumer_warp_groups * 4,
          stages = cfg90.stages;
        std::printf("%5d %6d %6d %4lld %4lld %10.4f %9.1f  %s %d x %d, %d, %d  %4.0f MHz %3.0f W\n",
                    D, causal, L, static_cast<long long>(B), static_cast<long long>(H), median,
                    tflops, sm90 ? "sm90" : "sm80", block_m, block_n, warps, stages,
                    clock_stats.mean_mhz, clock_stats.max_power_w);
        json << (first ? "" : ",\n") << "  {\"impl\": \"" << label << "\", \"D\": " << D
             << ", \"causal\": " << (causal ? "true" : "false") << ", \"L\": " << L
             << ", \"B\": " << B << ", \"H\": " << H << ", \"ms\": " << median
             << ", \"ms_min\": " << ms.front() << ", \"tflops\": " << tflops << ", \"kernel\": \""
             << (sm90 ? "sm90" : "sm80") << "\", \"block_m\": " << block_m
             << ", \"block_n\": " << block_n << ", \"warps\": " << warps
             << ", \"stages\": " << stages << ", \"pass\": \""
             << (backward ? "backward" : "forward") << "\", \"sm_mhz\": " << clock_stats.mean_mhz
             << ", \"sm_mhz_min\": " << clock_stats.min_mhz
             << ", \"power_w\": " << clock_stats.max_power_w
             << ", \"throttle\": " << clock_stats.reasons
             << ", \"clock_samples\": " << clock_stats.samples << "}";
        first = false;
      }
  json << "\n]\n";
  if (!json_path.empty()) std::ofstream(json_path) << json.str();
  for (auto& e : events) cudaEventDestroy(e);
  cudaStreamDestroy(stream);
  for (void* p : {q, k, v, out, dout, dq, dk, dv, lse})
    if (p != nullptr) cudaFree(p);
  return 0;
}
