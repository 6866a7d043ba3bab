// tileattn run: attention on .npy files. The outputs are checked before anything is read or
// computed and written only after the computation succeeded (output_files.hpp), so a failed
// run leaves no output behind and never touches an input.
#include <CLI/CLI.hpp>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "commands.hpp"
#include "cuda_staging.hpp"
#include "options.hpp"
#include "output_files.hpp"
#include "tensor_io.hpp"

namespace tileattn::tools {
namespace {

struct RunOptions {
  std::string q, k, v, out, lse, mask, key_lengths, alibi, cu_seqlens_q, cu_seqlens_k;
  std::int64_t max_seqlen_q = -1, max_seqlen_k = -1;  // -1: the longest in the offsets
  std::string layout = "bshd";
  std::string causal = "none";
  std::string window = "-1,-1";
  std::string dtype;  // empty: f16 when q, k, v are all f16, else f32
  std::string backend = "auto";
  std::string isa = "best";
  std::string scale;  // as typed; empty = 1/sqrt(D)
  float softcap = 0.0f;
  int threads = 0;
  bool f32_via_bf16 = false;
  bool verbose = false;
};

HostTensor load_float_input(const std::string& path, const char* name) {
  HostTensor t = load_npy(path, name);
  if (t.dtype() != DType::f32 && t.dtype() != DType::f16)
    throw ToolError(std::string(name) + ": " + path + ": dtype " + to_string(t.dtype()) +
                    " is not supported (expected float32 or float16)");
  return t;
}

int run(const RunOptions& o) {
  std::vector<NamedPath> outputs = {{"--out", o.out}};
  if (!o.lse.empty()) outputs.push_back({"--lse", o.lse});
  OutputFiles files(outputs, {{"--q", o.q},
                              {"--k", o.k},
                              {"--v", o.v},
                              {"--mask", o.mask},
                              {"--key-lengths", o.key_lengths},
                              {"--alibi", o.alibi},
                              {"--cu-seqlens-q", o.cu_seqlens_q},
                              {"--cu-seqlens-k", o.cu_seqlens_k}});
  AttentionArgs args;
  apply_causal(o.causal, args);
  parse_window(o.window, args.window_left, args.window_right);
  args.scale = parse_scale(o.scale);
  args.softcap = o.softcap;
  Context ctx;
  ctx.backend = parse_backend(o.backend);
  ctx.cpu_isa = parse_isa(o.isa);
  ctx.threads = o.threads;
  ctx.cuda_f32_via_bf16 = o.f32_via_bf16;

  AttentionBuffers buf;
  buf.layout = parse_layout(o.layout);
  buf.q = load_float_input(o.q, "--q");
  buf.k = load_float_input(o.k, "--k");
  buf.v = load_float_input(o.v, "--v");
  const bool all_f16 =
      buf.q.dtype() == DType::f16 && buf.k.dtype() == DType::f16 && buf.v.dtype() == DType::f16;
  const DType compute =
      o.dtype.empty() ? (all_f16 ? DType::f16 : DType::f32) : parse_dtype(o.dtype);
  buf.q = convert(std::move(buf.q), compute);
  buf.k = convert(std::move(buf.k), compute);
  buf.v = convert(std::move(buf.v), compute);
  if (!o.mask.empty()) buf.mask = load_npy(o.mask, "--mask");
  if (!o.key_lengths.empty()) buf.key_lengths = load_npy(o.key_lengths, "--key-lengths");
  if (!o.alibi.empty()) buf.alibi_slopes = load_npy(o.alibi, "--alibi");
  if (!o.cu_seqlens_q.empty()) buf.cu_seqlens_q = load_npy(o.cu_seqlens_q, "--cu-seqlens-q");
  if (!o.cu_seqlens_k.empty()) buf.cu_seqlens_k = load_npy(o.cu_seqlens_k, "--cu-seqlens-k");
  if (!buf.cu_seqlens_q.empty() && buf.layout != Layout::bshd)
    throw ToolError("--layout: a varlen batch (--cu-seqlens-q) is packed [total, H, D]: bshd only");
  args.max_seqlen_q = o.max_seqlen_q >= 0 ? o.max_seqlen_q : max_sequence_length(buf.cu_seqlens_q);
  args.max_seqlen_k = o.max_seqlen_k >= 0 ? o.max_seqlen_k : max_sequence_length(buf.cu_seqlens_k);
  // Uninitialised: the library writes every element (or throws, and nothing is saved).
  buf.out = HostTensor(DType::f32, out_shape(buf.q, buf.v), HostTensor::Uninitialized{});
  if (!o.lse.empty())
    buf.lse = HostTensor(DType::f32, lse_shape(buf.q, buf.layout), HostTensor::Uninitialized{});
  buf.bind(args);
  const DeviceStaging device(buf, args, ctx);  // --backend cuda: device copies

  const auto start = std::chrono::steady_clock::now();
  attention_forward(args, ctx);  // throws tileattn::Error on invalid input; nothing written yet
  device.synchronize();
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  device.fetch(buf);

  // Both outputs are complete on disk before either replaces anything.
  files.stage(0, npy_preamble(buf.out), buf.out.data(), buf.out.size_bytes());
  if (!o.lse.empty()) files.stage(1, npy_preamble(buf.lse), buf.lse.data(), buf.lse.size_bytes());
  files.commit();

  if (o.verbose)
    std::cout << "tileattn run: " << to_string(ctx.backend) << " backend, dtype "
              << to_string(compute) << ", attention " << elapsed.count() * 1e3 << " ms; wrote "
              << o.out << (o.lse.empty() ? "" : " and " + o.lse) << '\n';
  return 0;
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* sub =
      app.add_subcommand("run", "Attention on .npy inputs: OUT = softmax(scale Q K^T + masks) V");
  sub->add_option("--q", o->q, "Queries .npy, float32/float16, [B, Lq, Hq, D] (bshd)")->required();
  sub->add_option("--k", o->k, "Keys .npy, [B, Lk, Hkv, D]")->required();
  sub->add_option("--v", o->v, "Values .npy, [B, Lk, Hkv, Dv]")->required();
  sub->add_option("--out", o->out, "Output .npy, float32 [B, Lq, Hq, Dv] in --layout")->required();
  sub->add_option("--lse", o->lse, "Optional log-sum-exp output .npy, float32 [B, Hq, Lq]");
  sub->add_option("--layout", o->layout, "Memory order of q, k, v, out: bshd or bhsd")
      ->check(CLI::IsMember({"bshd", "bhsd"}))
      ->capture_default_str();
  check_causal_option(*sub, o->causal);
  check_window_option(*sub, o->window);
  sub->add_option("--mask", o->mask,
                  "Mask .npy, bool (true = attend) or float32 (additive), broadcastable to "
                  "[B, Hq, Lq, Lk]");
  sub->add_option("--key-lengths", o->key_lengths,
                  "Valid key lengths .npy, int32/int64 [B] (varlen: keys used per sequence)");
  sub->add_option("--cu-seqlens-q", o->cu_seqlens_q,
                  "Varlen batch: query offsets .npy, int32 [B + 1]; q, k, v, out are then packed "
                  "[total, H, D] and lse [Hq, total_q]");
  sub->add_option("--cu-seqlens-k", o->cu_seqlens_k,
                  "Varlen batch: key offsets .npy, int32 [B + 1]");
  sub->add_option("--max-seqlen-q", o->max_seqlen_q,
                  "Varlen: bound on every sequence's query count (default: the longest)");
  sub->add_option("--max-seqlen-k", o->max_seqlen_k,
                  "Varlen: bound on every sequence's key count (default: the longest)");
  add_scale_option(*sub, o->scale);
  sub->add_option("--softcap", o->softcap, "Softcap c > 0: s = c*tanh(s/c); 0 = off")
      ->capture_default_str();
  sub->add_option("--alibi", o->alibi, "ALiBi slopes .npy, float32 [Hq] or [B, Hq]");
  sub->add_option("--dtype", o->dtype,
                  "Precision the kernel computes in: f32, f16, bf16 (default: f16 for f16 inputs, "
                  "else f32)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  sub->add_option("--backend", o->backend, "auto, cpu, reference or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "reference", "cuda"}))
      ->capture_default_str();
  add_isa_option(*sub, o->isa);
  add_threads_option(*sub, o->threads);
  add_f32_via_bf16_flag(*sub, o->f32_via_bf16);
  sub->add_flag("--verbose", o->verbose,
                "Print the backend, the attention call's time and the files written");
  return {sub, [o] { return run(*o); }};
}

}  // namespace tileattn::tools
