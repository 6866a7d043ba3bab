// tileattn bench: GFLOP/s of the forward on random inputs, the median of timed runs after
// warm-up. With --backward also the backward's GFLOP/s (credited 2.5x the forward's FLOPs) and
// its ratio to the forward's, both measured in the same run. Allocates only the tensors of the
// call, so RSS stays near their size. (The naive baseline and the FMA peak the CPU bars are
// measured against are developer benchmarks: bench/baselines.) With --decode, the KV-cache
// decode benchmark of decode_bench.cpp instead.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <vector>

#include "bench_report.hpp"
#include "commands.hpp"
#include "cuda_staging.hpp"
#include "decode.hpp"
#include "library_info.hpp"
#include "options.hpp"
#include "timing.hpp"

namespace tileattn::tools {
namespace {

struct BenchOptions {
  Problem problem;
  int iters = 5;
  int warmup = 1;
  bool json = false;
  bool backward = false;
  bool deterministic = false;
  double max_seconds = 120.0;  // per timed direction
  int enqueue_burst = 0;       // CUDA: calls per host-time burst (0 = not measured)
  // --decode: attention_with_kvcache (decode.hpp)
  bool decode = false;
  DecodeBench decode_options;
};

struct BenchResult {
  double flops = 0.0;  // of one forward call
  Timing forward;
  std::optional<Timing> backward;
  std::optional<double> enqueue_s;  // host time to enqueue one forward (median of bursts)
  std::string isa;
  int threads = 1;
};

void print_json(const BenchOptions& o, const BenchResult& r) {
  const double forward_gflops = gflops(r.flops, r.forward.median_s);
  std::ostringstream os;
  os << "{" << problem_json_members(o.problem, r.isa, r.threads)
     << ", \"iters\": " << r.forward.runs << ", \"warmup\": " << o.warmup
     << ", \"flops\": " << json_number(r.flops)
     << ", \"flash_median_s\": " << json_number(r.forward.median_s)
     << ", \"flash_gflops\": " << json_number(forward_gflops);
  if (r.backward) {
    const double backward_gflops = gflops(2.5 * r.flops, r.backward->median_s);
    os << ", \"backward_flops\": " << json_number(2.5 * r.flops)
       << ", \"backward_median_s\": " << json_number(r.backward->median_s)
       << ", \"backward_gflops\": " << json_number(backward_gflops)
       << ", \"backward_forward_ratio\": " << json_number(backward_gflops / forward_gflops)
       << ", \"deterministic\": " << (o.deterministic ? "true" : "false");
  } else {
    os << ", \"backward_flops\": null, \"backward_median_s\": null, \"backward_gflops\": null"
          ", \"backward_forward_ratio\": null, \"deterministic\": null";
  }
  os << ", \"enqueue_host_us\": "
     << (r.enqueue_s ? json_number(*r.enqueue_s * 1e6) : std::string("null"));
  os << "}\n";
  std::cout << os.str();
}

void print_text(const BenchOptions& o, const BenchResult& r) {
  const Problem& p = o.problem;
  const double forward_gflops = gflops(r.flops, r.forward.median_s);
  std::printf("tileattn bench: %s\n", p.describe().c_str());
  std::printf("  backend %s (cpu isa %s), %d threads, median of %d runs after %d warm-up\n",
              p.backend.c_str(), r.isa.c_str(), r.threads, r.forward.runs, o.warmup);
  std::printf("  FLOPs per call: %.4g GFLOP = 2*B*Hq*Lq*Lk*(D+Dv)%s\n", r.flops / 1e9,
              p.causal != "none" && p.len_q == p.len_k ? " / 2 (causal, Lq == Lk)" : "");
  std::printf("  forward        %10.3f ms  %9.2f GFLOP/s\n", r.forward.median_s * 1e3,
              forward_gflops);
  if (r.backward) {
    const double backward_gflops = gflops(2.5 * r.flops, r.backward->median_s);
    std::printf("  backward       %10.3f ms  %9.2f GFLOP/s  (credited 2.5x the forward FLOPs%s)\n",
                r.backward->median_s * 1e3, backward_gflops,
                o.deterministic ? ", deterministic" : "");
    std::printf("  backward / forward  %.2f  (GFLOP/s ratio)\n", backward_gflops / forward_gflops);
  }
  if (r.enqueue_s)
    std::printf(
        "  forward enqueue %8.2f us of host time per call (bursts of %d from an idle GPU)\n",
        *r.enqueue_s * 1e6, o.enqueue_burst);
}

int bench(BenchOptions& o) {
  Problem& p = o.problem;
  p.resolve_defaults();
  if (o.iters < 1) throw ToolError("--iters must be at least 1");
  if (o.warmup < 0) throw ToolError("--warmup must not be negative");
  if (o.deterministic && !o.backward) throw ToolError("--deterministic needs --backward");
  if (o.backward) p.with_lse = true;  // the backward's input
  const Context ctx = p.context();
  BenchResult r;
  r.flops = p.flops();
  const bool cpu_backend = ctx.backend == Backend::cpu || ctx.backend == Backend::automatic;
  r.isa = cpu_backend ? to_string(cpu_isa_used(ctx.cpu_isa)) : "none";
  r.threads = threads_used(p.threads);

  const bool long_run = r.flops > 2e11;  // a few seconds per call on a small CPU
  if (long_run)
    std::fprintf(stderr, "tileattn bench: %s; generating inputs ...\n", p.describe().c_str());
  AttentionBuffers buffers = p.make_buffers();
  AttentionArgs args = p.args();
  buffers.bind(args);
  const AttentionArgs host_args = args;
  DeviceStaging device(buffers, args, ctx);  // --backend cuda: device copies

  if (long_run) std::fprintf(stderr, "tileattn bench: timing the forward ...\n");
  r.forward = time_runs(
      "tileattn bench: forward", o.warmup, o.iters,
      [&] {
        attention_forward(args, ctx);
        device.synchronize();  // host-clock timing: wait for the GPU
      },
      o.max_seconds);

  if (o.enqueue_burst > 0) {
    if (!device.active()) throw ToolError("--enqueue-burst needs --backend cuda");
    // The host's share of a call: a burst of calls enqueued back to back on an idle GPU,
    // fewer than the launch queue holds, so no call waits for the GPU.
    std::vector<double> bursts;
    for (int round = 0; round < 7; ++round) {
      device.synchronize();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < o.enqueue_burst; ++i) attention_forward(args, ctx);
      const std::chrono::duration<double> host = std::chrono::steady_clock::now() - start;
      bursts.push_back(host.count() / o.enqueue_burst);
    }
    device.synchronize();
    std::sort(bursts.begin(), bursts.end());
    r.enqueue_s = bursts[bursts.size() / 2];
  }

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

  if (o.json)
    print_json(o, r);
  else
    print_text(o, r);
  return 0;
}

// --decode, or the forward (and backward) benchmark; each refuses the other's options.
int bench_or_decode(BenchOptions& o, const CLI::App& sub) {
  if (!o.decode) {
    refuse_options(sub, {"--block-size", "--num-splits", "--ceiling-mib"}, "needs --decode");
    return bench(o);
  }
  refuse_options(sub,
                 {"--varlen", "--dropout", "--backward", "--deterministic", "--enqueue-burst",
                  "--f32-via-bf16"},
                 "does not apply to bench --decode");
  if (o.problem.causal == "top-left")
    throw ToolError(
        "--causal: bench --decode aligns the causal mask bottom-right (the KV cache's "
        "alignment); top-left does not apply");
  DecodeBench& d = o.decode_options;
  d.problem = o.problem;
  if (sub.count("--lq") == 0) d.problem.len_q = 1;     // one new token per sequence
  if (sub.count("--lk") == 0) d.problem.len_k = 4096;  // keys in the cache
  d.iters = o.iters;
  d.warmup = o.warmup;
  d.max_seconds = o.max_seconds;
  d.json = o.json;
  return bench_decode(d);
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  o->problem.heads = 16;
  o->problem.len_q = 2048;
  o->problem.dim = 128;
  CLI::App* sub =
      app.add_subcommand("bench", "GFLOP/s of the forward (and backward) on random inputs");
  o->problem.add_options(*sub);
  sub->add_option("--iters", o->iters, "Timed runs (the median is reported)")
      ->capture_default_str();
  sub->add_option("--warmup", o->warmup, "Untimed runs first")->capture_default_str();
  sub->add_flag("--json", o->json, "Print one JSON object instead of text (keys: docs/cli.md)");
  sub->add_flag("--backward", o->backward,
                "Also time the backward (dq, dk, dv): GFLOP/s credited 2.5x the forward's FLOPs, "
                "and the backward/forward ratio");
  sub->add_flag("--deterministic", o->deterministic,
                "With --backward: the deterministic backward (bitwise-identical gradients)");
  sub->add_option("--enqueue-burst", o->enqueue_burst,
                  "CUDA: also measure the host time to enqueue one forward call (bursts of N "
                  "calls on an idle GPU; N below the launch queue's depth, e.g. 100)")
      ->check(CLI::Range(0, 1000));
  sub->add_option("--max-seconds", o->max_seconds,
                  "Time budget per direction: no further runs once spent (at least one timed run)")
      ->capture_default_str();
  sub->add_flag("--decode", o->decode,
                "Time attention_with_kvcache instead: --lq new rows (default 1) over --lk cached "
                "keys (default 4096), GB/s of K and V read next to a memory ceiling");
  sub->add_option("--block-size", o->decode_options.block_size,
                  "--decode: 0 = contiguous cache, N = paged in blocks of N rows (shuffled table)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub->add_option("--num-splits", o->decode_options.num_splits,
                  "--decode: parts each sequence's keys are split into (0 = the library decides)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub->add_option("--ceiling-mib", o->decode_options.ceiling_mib,
                  "--decode: MiB of the memory ceiling's buffer (CPU: read by the attention's "
                  "threads; CUDA: copied device to device); above the last-level cache")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  return {sub, [o, sub] { return bench_or_decode(*o, *sub); }};
}

}  // namespace tileattn::tools
