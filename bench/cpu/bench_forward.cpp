// Google Benchmark micro-benchmarks of the CPU flash forward across shapes, dtypes and ISA
// levels. Figures are reported as FLOP rates (4·B·Hq·Lq·Lk·D, halved for causal with Lq = Lk).
// The `tileattn bench` command is the tool for the issue bars (it times a naive baseline in the
// same run); this binary is for quick A/B comparisons while tuning:
//   build/bench/cpu/tileattn_bench_cpu --benchmark_filter='f32/2048' --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tileattn/tileattn.hpp"

namespace {

using tileattn::DType;

struct Problem {
  std::int64_t heads, len, dim;
  DType dtype;
  bool causal;
  tileattn::CpuIsa isa;
};

void run(benchmark::State& state, Problem pr) {
  const std::int64_t n = pr.len * pr.heads * pr.dim;
  const std::size_t bytes = tileattn::size_of(pr.dtype);
  std::vector<unsigned char> q(n * bytes), k(n * bytes), v(n * bytes);
  std::vector<float> out(n);
  std::uint32_t s = 12345u;
  for (auto* buf : {&q, &k, &v})  // uniform values in [-0.5, 0.5) in the storage format
    for (std::size_t i = 0; i < buf->size(); i += bytes) {
      s = s * 1664525u + 1013904223u;
      const float x = static_cast<float>(s >> 8) / 16777216.0f - 0.5f;
      if (pr.dtype == DType::f32) {
        std::memcpy(&(*buf)[i], &x, 4);
      } else if (pr.dtype == DType::f16) {
        const _Float16 h = static_cast<_Float16>(x);
        std::memcpy(&(*buf)[i], &h, 2);
      } else {  // bf16: the top half of the f32 bits (truncation is fine for inputs)
        std::uint32_t bits;
        std::memcpy(&bits, &x, 4);
        const auto top = static_cast<std::uint16_t>(bits >> 16);
        std::memcpy(&(*buf)[i], &top, 2);
      }
    }
  tileattn::AttentionArgs a;
  a.q = tileattn::make_tensor(q.data(), pr.dtype, {1, pr.len, pr.heads, pr.dim});
  a.k = tileattn::make_tensor(k.data(), pr.dtype, {1, pr.len, pr.heads, pr.dim});
  a.v = tileattn::make_tensor(v.data(), pr.dtype, {1, pr.len, pr.heads, pr.dim});
  a.out = tileattn::make_tensor(out.data(), DType::f32, {1, pr.len, pr.heads, pr.dim});
  a.causal = pr.causal;
  tileattn::Context ctx;
  ctx.backend = tileattn::Backend::cpu;
  ctx.cpu_isa = pr.isa;
  for (auto _ : state) {
    tileattn::attention_forward(a, ctx);
    benchmark::DoNotOptimize(out.data());
  }
  const double flops = 4.0 * static_cast<double>(pr.heads) * static_cast<double>(pr.len) *
                       static_cast<double>(pr.len) * static_cast<double>(pr.dim) *
                       (pr.causal ? 0.5 : 1.0);
  state.counters["FLOP/s"] =
      benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

void register_all() {
  const struct {
    const char* name;
    DType dtype;
  } dtypes[] = {{"f32", DType::f32}, {"f16", DType::f16}, {"bf16", DType::bf16}};
  const struct {
    const char* name;
    tileattn::CpuIsa isa;
  } isas[] = {{"best", tileattn::CpuIsa::best},
              {"avx512", tileattn::CpuIsa::avx512},
              {"avx2", tileattn::CpuIsa::avx2}};
  for (const auto& d : dtypes)
    for (const auto& i : isas)
      for (std::int64_t len : {512, 2048})
        for (bool causal : {false, true}) {
          const std::string name = std::string(d.name) + "/" + std::to_string(len) + "/" +
                                   (causal ? "causal/" : "full/") + i.name;
          benchmark::RegisterBenchmark(name.c_str(), run,
                                       Problem{16, len, 128, d.dtype, causal, i.isa})
              ->Unit(benchmark::kMillisecond)
              ->UseRealTime();
        }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
