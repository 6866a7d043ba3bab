// tileattn_bench_baselines: the CPU bars of docs/perf/cpu.md. Times the flash forward (through
// the public API, as `tileattn bench` does), the naive OpenBLAS baseline on the same inputs and
// the machine's f32 FMA peak in one run, and prints their ratios. The baseline's output must
// agree with the flash kernel's (relative L2 error 1e-4 for f32, 2e-2 for 16-bit storage), or
// the run fails: a baseline that computes something else measures nothing.
//   tileattn_bench_baselines [problem options of `tileattn bench`] [--json] [--no-baseline] ...
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>

#include "bench_report.hpp"
#include "compare.hpp"
#include "cuda_staging.hpp"
#include "fma_peak.hpp"
#include "library_info.hpp"
#include "naive_baseline.hpp"
#include "openblas_core.hpp"
#include "options.hpp"
#include "timing.hpp"

namespace tileattn::bench {
namespace {

using tools::Problem;

struct Options {
  Problem problem;
  int iters = 5;
  int warmup = 1;
  bool json = false;
  bool no_baseline = false;
  std::string baseline_threading = "heads";
  double peak_seconds = 0.3;
  double max_seconds = 120.0;  // per timed kernel
};

struct Result {
  double flops = 0.0;
  tools::Timing flash;
  std::optional<tools::Timing> baseline;
  double baseline_rel_l2 = 0.0;  // ||flash - naive|| / ||naive||
  std::string isa;
  int threads = 1;
  FmaPeak peak;
};

double physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? static_cast<double>(pages) * static_cast<double>(page_size)
                                    : 0.0;
}

void print_json(const Options& o, const Result& r) {
  using tools::json_number;
  const double flash_gflops = tools::gflops(r.flops, r.flash.median_s);
  std::ostringstream os;
  os << "{" << tools::problem_json_members(o.problem, r.isa, r.threads)
     << ", \"iters\": " << r.flash.runs << ", \"warmup\": " << o.warmup
     << ", \"flops\": " << json_number(r.flops)
     << ", \"flash_median_s\": " << json_number(r.flash.median_s)
     << ", \"flash_gflops\": " << json_number(flash_gflops);
  if (r.baseline) {
    const double base_gflops = tools::gflops(r.flops, r.baseline->median_s);
    os << ", \"baseline_blas_core\": \"" << openblas_core() << "\", \"baseline_threading\": \""
       << o.baseline_threading << "\", \"baseline_median_s\": " << json_number(r.baseline->median_s)
       << ", \"baseline_gflops\": " << json_number(base_gflops)
       << ", \"ratio\": " << json_number(flash_gflops / base_gflops)
       << ", \"flash_vs_baseline_rel_l2\": " << json_number(r.baseline_rel_l2);
  } else {
    os << ", \"baseline_blas_core\": null, \"baseline_threading\": null, \"baseline_median_s\": "
          "null, \"baseline_gflops\": null, \"ratio\": null, \"flash_vs_baseline_rel_l2\": null";
  }
  if (r.peak.gflops > 0.0)
    os << ", \"peak_isa\": \"" << r.peak.isa
       << "\", \"peak_gflops\": " << json_number(r.peak.gflops)
       << ", \"flash_pct_of_peak\": " << json_number(100.0 * flash_gflops / r.peak.gflops);
  else
    os << ", \"peak_isa\": null, \"peak_gflops\": null, \"flash_pct_of_peak\": null";
  os << "}\n";
  std::cout << os.str();
}

void print_text(const Options& o, const Result& r) {
  const Problem& p = o.problem;
  const double flash_gflops = tools::gflops(r.flops, r.flash.median_s);
  std::printf("tileattn_bench_baselines: %s\n", p.describe().c_str());
  std::printf("  backend %s (cpu isa %s), %d threads, median of %d runs after %d warm-up\n",
              p.backend.c_str(), r.isa.c_str(), r.threads, r.flash.runs, o.warmup);
  std::printf("  FLOPs per call: %.4g GFLOP = 2*B*Hq*Lq*Lk*(D+Dv)%s\n", r.flops / 1e9,
              p.causal != "none" && p.len_q == p.len_k ? " / 2 (causal, Lq == Lk)" : "");
  std::printf("  flash          %10.3f ms  %9.2f GFLOP/s", r.flash.median_s * 1e3, flash_gflops);
  if (r.peak.gflops > 0.0)
    std::printf("  (%.1f%% of FMA peak)", 100.0 * flash_gflops / r.peak.gflops);
  std::printf("\n");
  if (r.baseline) {
    const double base_gflops = tools::gflops(r.flops, r.baseline->median_s);
    std::printf("  naive sgemm    %10.3f ms  %9.2f GFLOP/s  (OpenBLAS %s, threading: %s)\n",
                r.baseline->median_s * 1e3, base_gflops, openblas_core(),
                o.baseline_threading.c_str());
    std::printf("  flash / naive  %.2fx   (outputs agree to rel L2 %.1e)\n",
                flash_gflops / base_gflops, r.baseline_rel_l2);
  } else {
    std::printf("  naive sgemm    skipped\n");
  }
  if (r.peak.gflops > 0.0)
    std::printf("  f32 FMA peak   %9.2f GFLOP/s (%s, %d threads)\n", r.peak.gflops, r.peak.isa,
                r.peak.threads);
}

int run(Options& o) {
  Problem& p = o.problem;
  p.resolve_defaults();
  if (o.iters < 1) throw tools::ToolError("--iters must be at least 1");
  if (o.warmup < 0) throw tools::ToolError("--warmup must not be negative");
  const Context ctx = p.context();
  Result r;
  r.flops = p.flops();
  const bool cpu_backend = ctx.backend == Backend::cpu || ctx.backend == Backend::automatic;
  r.isa = cpu_backend ? to_string(tools::cpu_isa_used(ctx.cpu_isa)) : "none";
  r.threads = tools::threads_used(p.threads);

  tools::AttentionBuffers buffers = p.make_buffers();
  AttentionArgs args = p.args();
  buffers.bind(args);
  const AttentionArgs host_args = args;
  tools::DeviceStaging device(buffers, args, ctx);  // --backend cuda: device copies
  r.flash = tools::time_runs(
      "flash", o.warmup, o.iters,
      [&] {
        attention_forward(args, ctx);
        device.synchronize();
      },
      o.max_seconds);
  device.fetch(buffers);

  const auto threading =
      o.baseline_threading == "heads" ? BaselineThreading::heads : BaselineThreading::blas;
  const double baseline_bytes =
      NaiveBaseline::bytes_needed(p.batch, p.heads, p.len_q, p.len_k, p.dim, p.dim_v, p.kv_heads,
                                  tools::parse_dtype(p.dtype), threading, p.threads);
  const double memory = physical_memory_bytes();
  if (!o.no_baseline && memory > 0.0 && baseline_bytes > 0.5 * memory) {
    std::fprintf(stderr,
                 "skipping the naive baseline: its score matrices and copies need %s, over half "
                 "of this machine's %s (use --no-baseline)\n",
                 tools::format_bytes(baseline_bytes).c_str(), tools::format_bytes(memory).c_str());
    o.no_baseline = true;
  }
  if (!o.no_baseline) {
    NaiveBaseline baseline(buffers, host_args, threading, p.threads);
    r.baseline = tools::time_runs(
        "naive", o.warmup, o.iters, [&] { baseline.run(); }, o.max_seconds);
    r.baseline_rel_l2 = tools::compare(buffers.out, baseline.out()).rel_l2;
  }
  if (o.peak_seconds > 0.0) r.peak = measure_fma_peak(p.threads, o.peak_seconds);

  if (o.json)
    print_json(o, r);
  else
    print_text(o, r);
  const double agreement = p.dtype == "f32" && ctx.backend != Backend::cuda ? 1e-4 : 2e-2;
  if (r.baseline && !(r.baseline_rel_l2 <= agreement)) {
    std::fprintf(stderr, "error: flash and the naive baseline disagree (rel L2 %.2e > %.0e)\n",
                 r.baseline_rel_l2, agreement);
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace tileattn::bench

int main(int argc, char** argv) {
  using namespace tileattn::bench;
  reexec_with_openblas_core_if_needed(argv);
  Options o;
  o.problem.heads = 16;
  o.problem.len_q = 2048;
  o.problem.dim = 128;
  CLI::App app{"The flash forward vs the naive OpenBLAS baseline and the FMA peak (the CPU bars)",
               "tileattn_bench_baselines"};
  o.problem.add_options(app);
  app.add_option("--iters", o.iters, "Timed runs (the median is reported)")->capture_default_str();
  app.add_option("--warmup", o.warmup, "Untimed runs first")->capture_default_str();
  app.add_flag("--json", o.json, "Print one JSON object instead of text (keys: docs/perf/cpu.md)");
  app.add_flag("--no-baseline", o.no_baseline,
               "Skip the naive baseline (it stores a Lq*Lk f32 score matrix per thread)");
  app.add_option("--baseline-threading", o.baseline_threading,
                 "heads: OpenMP over heads, 1-thread OpenBLAS; blas: threaded OpenBLAS per head")
      ->check(CLI::IsMember({"heads", "blas"}))
      ->capture_default_str();
  app.add_option("--max-seconds", o.max_seconds,
                 "Time budget per kernel: no further runs once spent (at least one timed run)")
      ->capture_default_str();
  app.add_option("--peak-seconds", o.peak_seconds, "Duration of the FMA peak measurement; 0 skips")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << "tileattn_bench_baselines: error: " << tileattn::tools::one_line(e.what()) << '\n';
    return 1;
  }
}
