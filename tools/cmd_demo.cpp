// tileattn demo: one representative shape, computed, timed, checked against the reference on a
// slice, and set against the memory the naive algorithm would have needed. With --decode, the
// decode loop over a paged KV cache of decode_demo.cpp instead.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "commands.hpp"
#include "compare.hpp"
#include "cuda_staging.hpp"
#include "decode.hpp"
#include "library_info.hpp"
#include "options.hpp"
#include "timing.hpp"

namespace tileattn::tools {
namespace {

struct DemoOptions {
  Problem problem;
  std::int64_t check_rows = 256;
  bool decode = false;
  DecodeDemo decode_options;  // --decode
};

double peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;  // ru_maxrss is in KiB on Linux
}

// A [B, L, H, D] view of rows [row0, row0 + rows) and heads [head0, head0 + heads) of batch 0.
Tensor slice(Tensor t, std::int64_t row0, std::int64_t rows, std::int64_t head0,
             std::int64_t heads) {
  t.data = static_cast<std::byte*>(t.data) +
           (row0 * t.stride[1] + head0 * t.stride[2]) * static_cast<std::int64_t>(size_of(t.dtype));
  t.shape[0] = 1, t.shape[1] = rows, t.shape[2] = heads;
  return t;
}

int demo(DemoOptions& o) {
  Problem& p = o.problem;
  p.resolve_defaults();
  // The demo's checks read a padded f32 output.
  if (p.is_varlen()) throw ToolError("--varlen: demo runs padded batches (use bench or verify)");
  if (p.out_dtype != "f32") throw ToolError("--out-dtype: demo writes f32 outputs only");
  p.with_lse = true;
  const Context ctx = p.context();
  AttentionArgs args = p.args();
  const std::int64_t group = p.kv_heads > 0 ? p.heads / p.kv_heads : 1;
  const bool use_cpu = ctx.backend == Backend::cpu || ctx.backend == Backend::automatic;

  std::printf("tileattn demo: %s attention of one layer\n",
              group > 1 ? "grouped-query (GQA)" : "multi-head");
  std::printf("  q [B=%lld, Lq=%lld, Hq=%lld, D=%lld]   k, v [B=%lld, Lk=%lld, Hkv=%lld, D=%lld]\n",
              static_cast<long long>(p.batch), static_cast<long long>(p.len_q),
              static_cast<long long>(p.heads), static_cast<long long>(p.dim),
              static_cast<long long>(p.batch), static_cast<long long>(p.len_k),
              static_cast<long long>(p.kv_heads), static_cast<long long>(p.dim));
  std::printf("  out = softmax(q k^T / sqrt(D) + mask) v, %s causal mask, %s storage;\n",
              p.causal == "none" ? "no" : p.causal.c_str(), p.dtype.c_str());
  if (group > 1)
    std::printf("  each group of %lld query heads shares one key/value head.\n",
                static_cast<long long>(group));
  std::printf(
      "  Flash attention walks k and v tile by tile with an online softmax: the Lq x Lk\n"
      "  score matrix of a head is never stored.\n\n");

  AttentionBuffers buffers = p.make_buffers();
  buffers.bind(args);
  const AttentionArgs host_args = args;
  const DeviceStaging device(buffers, args, ctx);  // --backend cuda: device copies

  // 1. Speed: one warm-up run; three more timed runs unless it was already slow.
  const double rss_before = peak_rss_bytes();
  const double first = seconds_since([&] {
    attention_forward(args, ctx);
    device.synchronize();
  });
  const double rss_growth = std::max(0.0, peak_rss_bytes() - rss_before);
  const double seconds = first > 2.0 ? first : time_runs("tileattn demo", 0, 3, [&] {
                                                 attention_forward(args, ctx);
                                                 device.synchronize();
                                               }).median_s;
  device.fetch(buffers);
  const std::string where =
      p.backend + " backend" +
      (use_cpu ? std::string(" (isa level ") + to_string(cpu_isa_used(ctx.cpu_isa)) + ")"
               : std::string());
  std::printf("1. Speed    %s, %d threads: %.1f ms per call, %.1f GFLOP/s\n", where.c_str(),
              threads_used(p.threads), seconds * 1e3, p.flops() / seconds / 1e9);
  std::printf("            (%.2f GFLOP per call = 2*B*Hq*Lq*Lk*(D+Dv)%s)\n", p.flops() / 1e9,
              p.causal != "none" && p.len_q == p.len_k ? " / 2 for causal" : "");

  // 2. Memory.
  const double score_bytes = static_cast<double>(p.batch * p.heads) * static_cast<double>(p.len_q) *
                             static_cast<double>(p.len_k) * 4.0;
  const double tensor_bytes =
      static_cast<double>(buffers.q.size_bytes() + buffers.k.size_bytes() + buffers.v.size_bytes() +
                          buffers.out.size_bytes() + buffers.lse.size_bytes());
  std::printf("2. Memory   the naive algorithm stores B*Hq*Lq*Lk f32 scores: %s\n",
              format_bytes(score_bytes).c_str());
  std::printf("            flash: %s of q, k, v, out, lse + %s working memory (peak RSS growth)\n",
              format_bytes(tensor_bytes).c_str(), format_bytes(rss_growth).c_str());

  // 3. Check a slice against the reference: batch 0, the query heads of KV group 0, and the
  // query rows whose key positions are those of the full problem (last rows for bottom-right
  // alignment, first rows for top-left).
  const std::int64_t rows = std::min(o.check_rows, p.len_q);
  const std::int64_t row0 =
      args.causal && args.alignment == Alignment::top_left ? 0 : p.len_q - rows;
  HostTensor ref_out(DType::f32, {1, rows, group, p.dim_v});
  HostTensor ref_lse(DType::f32, {1, group, rows});
  AttentionArgs ref_args = host_args;
  ref_args.q = slice(host_args.q, row0, rows, 0, group);
  ref_args.k = slice(host_args.k, 0, p.len_k, 0, 1);
  ref_args.v = slice(host_args.v, 0, p.len_k, 0, 1);
  ref_args.out = ref_out.view("out");
  ref_args.lse = ref_lse.view("lse");
  Context ref_ctx;
  ref_ctx.backend = Backend::reference;
  ref_ctx.threads = p.threads;
  attention_forward(ref_args, ref_ctx);

  HostTensor flash_out(DType::f32, ref_out.shape()), flash_lse(DType::f32, ref_lse.shape());
  const float* out = buffers.out.data_as<float>();
  const float* lse = buffers.lse.data_as<float>();
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t h = 0; h < group; ++h) {
      std::copy_n(out + ((row0 + i) * p.heads + h) * p.dim_v, p.dim_v,
                  flash_out.data_as<float>() + (i * group + h) * p.dim_v);
      flash_lse.data_as<float>()[h * rows + i] = lse[h * p.len_q + row0 + i];
    }
  // The cuda backend computes f32 storage with bf16 operands (docs/perf/gpu.md).
  const double tolerance = p.dtype == "f32" && ctx.backend != Backend::cuda ? 1e-5 : 1e-2;
  const ErrorStats out_err = compare(flash_out, ref_out), lse_err = compare(flash_lse, ref_lse);
  const bool ok = out_err.rel_l2 <= tolerance && lse_err.rel_l2 <= tolerance;
  std::printf(
      "3. Check    vs the double-precision reference on batch 0, query heads 0-%lld (KV "
      "head 0), query rows %lld-%lld:\n",
      static_cast<long long>(group - 1), static_cast<long long>(row0),
      static_cast<long long>(row0 + rows - 1));
  std::printf("            out rel L2 %.2e (max abs %.2e), lse rel L2 %.2e: %s (tolerance %.0e)\n",
              out_err.rel_l2, out_err.max_abs, lse_err.rel_l2, ok ? "PASS" : "FAIL", tolerance);
  std::printf(
      "\nNext: tileattn bench --heads %lld --kv-heads %lld --lq %lld --dim %lld --causal %s\n",
      static_cast<long long>(p.heads), static_cast<long long>(p.kv_heads),
      static_cast<long long>(p.len_q), static_cast<long long>(p.dim), p.causal.c_str());
  return ok ? 0 : 1;
}

// --decode, or the one-shape demo; each refuses the other's options.
int demo_or_decode(DemoOptions& o, const CLI::App& sub) {
  if (!o.decode) {
    refuse_options(sub, {"--prompt-lengths", "--steps", "--block-size"}, "needs --decode");
    return demo(o);
  }
  refuse_options(
      sub,
      {"--batch", "--lq", "--lk", "--dim-v", "--causal", "--window", "--softcap", "--scale",
       "--out-dtype", "--f32-via-bf16", "--varlen", "--dropout", "--check-rows"},
      "does not apply to demo --decode (the sequences are --prompt-lengths; causal)");
  o.decode_options.problem = o.problem;
  return demo_decode(o.decode_options);
}

}  // namespace

Command add_demo_command(CLI::App& app) {
  auto o = std::make_shared<DemoOptions>();
  Problem& p = o->problem;
  p.batch = 1, p.heads = 16, p.kv_heads = 4, p.len_q = 2048, p.dim = 128;
  p.causal = "bottom-right";
  CLI::App* sub = app.add_subcommand(
      "demo", "A guided run: GQA causal attention at a 2k context, timed and checked");
  p.add_options(*sub);
  sub->add_option("--check-rows", o->check_rows, "Query rows checked against the reference")
      ->capture_default_str();
  sub->add_flag("--decode", o->decode,
                "Instead: a decode loop over a paged KV cache (prefill, then one token per "
                "sequence per step), checked against attention_forward");
  sub->add_option("--prompt-lengths", o->decode_options.prompt_lengths,
                  "--decode: one sequence per prompt, of these lengths")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--steps", o->decode_options.steps, "--decode: decode steps")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  sub->add_option("--block-size", o->decode_options.block_size, "--decode: tokens per page")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20))
      ->capture_default_str();
  return {sub, [o, sub] { return demo_or_decode(*o, *sub); }};
}

}  // namespace tileattn::tools
