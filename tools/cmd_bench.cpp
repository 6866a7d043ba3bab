// tileattn bench: GFLOP/s of the flash kernel and of the naive sgemm baseline in the same run,
// their ratio, and the flash kernel's share of the measured FMA peak. With --backward: the
// backward's GFLOP/s (credited 2.5x the forward's FLOPs) and its ratio to the forward's, both
// measured in the same run. Allocates only q, k, v and
// out (plus the baseline's buffers unless --no-baseline), so RSS stays near the tensors' size.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "commands.hpp"
#include "common/threads.hpp"
#include "compare.hpp"
#include "cpu/flash_forward.hpp"
#include "cuda_staging.hpp"
#include "fma_peak.hpp"
#include "naive_baseline.hpp"
#include "openblas_core.hpp"
#include "options.hpp"
#include "timing.hpp"

namespace tileattn::tools {
namespace {

struct BenchOptions {
  Problem problem;
  int iters = 5;
  int warmup = 1;
  bool json = false;
  bool no_baseline = false;
  bool backward = false;
  bool deterministic = false;
  std::string baseline_threading = "heads";
  double peak_seconds = 0.3;
  double max_seconds = 120.0;  // per timed kernel
};

struct BenchResult {
  double flops = 0.0;
  Timing flash;
  std::optional<Timing> backward;
  std::optional<Timing> baseline;
  double baseline_rel_l2 = 0.0;  // ||flash - naive|| / ||naive||: a sanity check of both
  std::string isa;
  FmaPeak peak;
};

double physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? static_cast<double>(pages) * static_cast<double>(page_size)
                                    : 0.0;
}

double gflops(double flops, double seconds) {
  return seconds > 0.0 ? flops / seconds / 1e9 : 0.0;
}

std::string number(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", x);
  return text;
}

void print_json(const BenchOptions& o, const BenchResult& r) {
  const Problem& p = o.problem;
  std::int64_t wl = -1, wr = -1;
  parse_window(p.window, wl, wr);
  const double flash_gflops = gflops(r.flops, r.flash.median_s);
  std::ostringstream os;
  os << "{\"version\": \"" << build_info().version << "\", \"backend\": \"" << p.backend
     << "\", \"isa\": \"" << r.isa << "\", \"dtype\": \"" << p.dtype
     << "\", \"threads\": " << r.peak.threads << ", \"batch\": " << p.batch
     << ", \"heads\": " << p.heads << ", \"kv_heads\": " << p.kv_heads << ", \"lq\": " << p.len_q
     << ", \"lk\": " << p.len_k << ", \"dim\": " << p.dim << ", \"dim_v\": " << p.dim_v
     << ", \"causal\": \"" << p.causal << "\", \"window_left\": " << wl
     << ", \"window_right\": " << wr << ", \"softcap\": " << number(p.softcap)
     << ", \"seed\": " << p.seed << ", \"iters\": " << r.flash.runs << ", \"warmup\": " << o.warmup
     << ", \"flops\": " << number(r.flops) << ", \"flash_median_s\": " << number(r.flash.median_s)
     << ", \"flash_gflops\": " << number(flash_gflops) << ", \"dropout\": " << number(p.dropout);
  if (r.backward) {
    const double backward_gflops = gflops(2.5 * r.flops, r.backward->median_s);
    os << ", \"backward_flops\": " << number(2.5 * r.flops)
       << ", \"backward_median_s\": " << number(r.backward->median_s)
       << ", \"backward_gflops\": " << number(backward_gflops)
       << ", \"backward_forward_ratio\": " << number(backward_gflops / flash_gflops)
       << ", \"deterministic\": " << (o.deterministic ? "true" : "false");
  } else {
    os << ", \"backward_flops\": null, \"backward_median_s\": null, \"backward_gflops\": null"
          ", \"backward_forward_ratio\": null, \"deterministic\": null";
  }
  if (r.baseline) {
    const double base_gflops = gflops(r.flops, r.baseline->median_s);
    os << ", \"baseline_blas_core\": \"" << openblas_core() << "\", \"baseline_threading\": \""
       << o.baseline_threading << "\", \"baseline_median_s\": " << number(r.baseline->median_s)
       << ", \"baseline_gflops\": " << number(base_gflops)
       << ", \"ratio\": " << number(flash_gflops / base_gflops)
       << ", \"flash_vs_baseline_rel_l2\": " << number(r.baseline_rel_l2);
  } else {
    os << ", \"baseline_blas_core\": null, \"baseline_threading\": null, \"baseline_median_s\": "
          "null, \"baseline_gflops\": null"
          ", \"ratio\": null, \"flash_vs_baseline_rel_l2\": null";
  }
  if (r.peak.gflops > 0.0)
    os << ", \"peak_isa\": \"" << r.peak.isa << "\", \"peak_gflops\": " << number(r.peak.gflops)
       << ", \"flash_pct_of_peak\": " << number(100.0 * flash_gflops / r.peak.gflops);
  else
    os << ", \"peak_isa\": null, \"peak_gflops\": null, \"flash_pct_of_peak\": null";
  os << "}\n";
  std::cout << os.str();
}

void print_text(const BenchOptions& o, const BenchResult& r) {
  const Problem& p = o.problem;
  const double flash_gflops = gflops(r.flops, r.flash.median_s);
  std::printf("tileattn bench: %s\n", p.describe().c_str());
  std::printf("  backend %s (cpu isa %s), %d threads, median of %d runs after %d warm-up\n",
              p.backend.c_str(), r.isa.c_str(), r.peak.threads, r.flash.runs, o.warmup);
  std::printf("  FLOPs per call: %.4g GFLOP = 2*B*Hq*Lq*Lk*(D+Dv)%s\n", r.flops / 1e9,
              p.causal != "none" && p.len_q == p.len_k ? " / 2 (causal, Lq == Lk)" : "");
  std::printf("  flash          %10.3f ms  %9.2f GFLOP/s", r.flash.median_s * 1e3, flash_gflops);
  if (r.peak.gflops > 0.0)
    std::printf("  (%.1f%% of FMA peak)", 100.0 * flash_gflops / r.peak.gflops);
  std::printf("\n");
  if (r.backward) {
    const double backward_gflops = gflops(2.5 * r.flops, r.backward->median_s);
    std::printf("  backward       %10.3f ms  %9.2f GFLOP/s  (credited 2.5x the forward FLOPs%s)\n",
                r.backward->median_s * 1e3, backward_gflops,
                o.deterministic ? ", deterministic" : "");
    std::printf("  backward / forward  %.2f  (GFLOP/s ratio)\n", backward_gflops / flash_gflops);
  }
  if (r.baseline) {
    const double base_gflops = gflops(r.flops, r.baseline->median_s);
    std::printf("  naive sgemm    %10.3f ms  %9.2f GFLOP/s  (OpenBLAS %s, threading: %s)\n",
                r.baseline->median_s * 1e3, base_gflops, openblas_core(),
                o.baseline_threading.c_str());
    std::printf("  flash / naive  %.2fx   (outputs agree to rel L2 %.1e)\n",
                flash_gflops / base_gflops, r.baseline_rel_l2);
  } else {
    std::printf("  naive sgemm    skipped (%s)\n", o.backward ? "--backward" : "--no-baseline");
  }
  if (r.peak.gflops > 0.0)
    std::printf("  f32 FMA peak   %9.2f GFLOP/s (%s, %d threads)\n", r.peak.gflops, r.peak.isa,
                r.peak.threads);
}

int bench(BenchOptions& o) {
  Problem& p = o.problem;
  p.resolve_defaults();
  if (o.iters < 1) throw ToolError("--iters must be at least 1");
  if (o.warmup < 0) throw ToolError("--warmup must not be negative");
  if (o.deterministic && !o.backward) throw ToolError("--deterministic needs --backward");
  if (o.backward) {
    p.with_lse = true;     // the backward's input
    o.no_baseline = true;  // the naive baseline is a forward
  }
  const Context ctx = p.context();
  BenchResult r;
  r.flops = p.flops();
  const bool cpu_backend = ctx.backend == Backend::cpu || ctx.backend == Backend::automatic;
  r.isa = cpu_backend ? to_string(detail::select_cpu_isa(ctx.cpu_isa)) : "none";

  const bool long_run = r.flops > 2e11;  // a few seconds per call on a small CPU
  if (long_run)
    std::fprintf(stderr, "tileattn bench: %s; generating inputs ...\n", p.describe().c_str());
  AttentionBuffers buffers = p.make_buffers();
  AttentionArgs args = p.args();
  buffers.bind(args);
  const AttentionArgs host_args = args;
  DeviceStaging device(buffers, args, ctx);  // --backend cuda: device copies

  if (long_run) std::fprintf(stderr, "tileattn bench: timing the flash kernel ...\n");
  r.flash = time_runs(
      "tileattn bench: flash", o.warmup, o.iters,
      [&] {
        attention_forward(args, ctx);
        device.synchronize();  // host-clock timing: wait for the GPU
      },
      o.max_seconds);
  device.fetch(buffers);

  if (o.backward) {
    if (long_run) std::fprintf(stderr, "tileattn bench: timing the backward ...\n");
    const Problem::BackwardBuffers grads = p.make_backward_buffers();
    AttentionBackwardArgs backward_args;
    // out and lse from the forward (on the device for --backend cuda).
    static_cast<AttentionArgs&>(backward_args) = device.active() ? args : host_args;
    grads.bind(backward_args);
    device.stage_gradients(grads, backward_args);
    backward_args.deterministic = o.deterministic;
    r.backward = time_runs(
        "tileattn bench: backward", o.warmup, o.iters,
        [&] {
          attention_backward(backward_args, ctx);
          device.synchronize();
        },
        o.max_seconds);
  }

  const double baseline_bytes = NaiveBaseline::bytes_needed(
      p.batch, p.heads, p.len_q, p.len_k, p.dim, p.dim_v, p.kv_heads, parse_dtype(p.dtype),
      o.baseline_threading == "heads" ? BaselineThreading::heads : BaselineThreading::blas,
      p.threads);
  const double memory = physical_memory_bytes();
  if (!o.no_baseline && memory > 0.0 && baseline_bytes > 0.5 * memory) {
    std::fprintf(stderr,
                 "tileattn bench: skipping the naive baseline: its score matrices and copies need "
                 "%s, over half of this machine's %s (use --no-baseline)\n",
                 format_bytes(baseline_bytes).c_str(), format_bytes(memory).c_str());
    o.no_baseline = true;
  }
  if (!o.no_baseline) {
    if (long_run) std::fprintf(stderr, "tileattn bench: timing the naive sgemm baseline ...\n");
    const auto threading =
        o.baseline_threading == "heads" ? BaselineThreading::heads : BaselineThreading::blas;
    NaiveBaseline baseline(buffers, host_args, threading, p.threads);
    r.baseline = time_runs(
        "tileattn bench: naive", o.warmup, o.iters, [&] { baseline.run(); }, o.max_seconds);
    r.baseline_rel_l2 = compare(buffers.out, baseline.out()).rel_l2;
  }
  if (o.peak_seconds > 0.0)
    r.peak = measure_fma_peak(p.threads, o.peak_seconds);
  else
    r.peak.threads = detail::resolve_threads(p.threads);

  if (o.json)
    print_json(o, r);
  else
    print_text(o, r);
  return 0;
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  o->problem.heads = 16;
  o->problem.len_q = 2048;
  o->problem.dim = 128;
  CLI::App* sub = app.add_subcommand(
      "bench", "GFLOP/s of the flash kernel vs a naive OpenBLAS sgemm baseline, on random inputs");
  o->problem.add_options(*sub);
  sub->add_option("--iters", o->iters, "Timed runs (the median is reported)")
      ->capture_default_str();
  sub->add_option("--warmup", o->warmup, "Untimed runs first")->capture_default_str();
  sub->add_flag("--json", o->json, "Print one JSON object instead of text (keys: docs/cli.md)");
  sub->add_flag("--backward", o->backward,
                "Also time the backward (dq, dk, dv; no naive baseline): GFLOP/s credited 2.5x "
                "the forward's FLOPs, and the backward/forward ratio");
  sub->add_flag("--deterministic", o->deterministic,
                "With --backward: the deterministic backward (bitwise-identical gradients)");
  sub->add_flag("--no-baseline", o->no_baseline,
                "Skip the naive baseline (it stores a Lq*Lk f32 score matrix per thread)");
  sub->add_option("--baseline-threading", o->baseline_threading,
                  "heads: OpenMP over heads, 1-thread OpenBLAS; blas: threaded OpenBLAS per head")
      ->check(CLI::IsMember({"heads", "blas"}))
      ->capture_default_str();
  sub->add_option("--max-seconds", o->max_seconds,
                  "Time budget per kernel: no further runs once spent (at least one timed run)")
      ->capture_default_str();
  sub->add_option("--peak-seconds", o->peak_seconds,
                  "Duration of the FMA peak measurement; 0 skips")
      ->capture_default_str();
  return {sub, [o] { return bench(*o); }};
}

}  // namespace tileattn::tools
