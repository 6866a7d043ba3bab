// tileattn run: attention on .npy files. OUT (and LSE) are written only after the computation
// succeeded, through a temporary name and a rename, so a failed run leaves no output behind.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "commands.hpp"
#include "cuda_staging.hpp"
#include "options.hpp"
#include "tensor_io.hpp"

namespace tileattn::tools {
namespace {

struct RunOptions {
  std::string q, k, v, out, lse, mask, key_lengths, alibi;
  std::string layout = "bshd";
  std::string causal = "none";
  std::string window = "-1,-1";
  std::string dtype;  // empty: f16 when q, k, v are all f16, else f32
  std::string backend = "auto";
  std::string isa = "best";
  std::string scale;  // as typed; empty = 1/sqrt(D)
  float softcap = 0.0f;
  int threads = 0;
  bool verbose = false;
};

HostTensor load_float_input(const std::string& path, const char* name) {
  HostTensor t = load_npy(path, name);
  if (t.dtype() != DType::f32 && t.dtype() != DType::f16)
    throw ToolError(std::string(name) + ": " + path + ": dtype " + to_string(t.dtype()) +
                    " is not supported (expected float32 or float16)");
  return t;
}

// Removes the temporary files it was given unless release() was called.
class TempFiles {
 public:
  std::filesystem::path add(const std::filesystem::path& final_path) {
    std::filesystem::path tmp = final_path;
    tmp += ".tmp-" + std::to_string(::getpid());
    paths_.push_back(tmp);
    return tmp;
  }
  void release() { paths_.clear(); }
  ~TempFiles() {
    std::error_code ec;
    for (const auto& p : paths_) std::filesystem::remove(p, ec);
  }

 private:
  std::vector<std::filesystem::path> paths_;
};

// Fails early (before any computation) when an output cannot be created where asked.
void check_writable(const std::string& path, const char* flag) {
  const std::filesystem::path parent = std::filesystem::absolute(path).parent_path();
  if (!std::filesystem::is_directory(parent))
    throw ToolError(std::string(flag) + ": cannot write " + path + ": no directory " +
                    parent.string());
  if (std::filesystem::is_directory(path))
    throw ToolError(std::string(flag) + ": cannot write " + path + ": it is a directory");
}

int run(const RunOptions& o) {
  check_writable(o.out, "--out");
  if (!o.lse.empty()) check_writable(o.lse, "--lse");
  AttentionArgs args;
  apply_causal(o.causal, args);
  parse_window(o.window, args.window_left, args.window_right);
  args.scale = parse_scale(o.scale);
  args.softcap = o.softcap;
  Context ctx;
  ctx.backend = parse_backend(o.backend);
  ctx.cpu_isa = parse_isa(o.isa);
  ctx.threads = o.threads;

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
  buf.out = HostTensor(DType::f32, out_shape(buf.q, buf.v));
  if (!o.lse.empty()) buf.lse = HostTensor(DType::f32, lse_shape(buf.q, buf.layout));
  buf.bind(args);
  const DeviceStaging device(buf, args, ctx);  // --backend cuda: device copies

  const auto start = std::chrono::steady_clock::now();
  attention_forward(args, ctx);  // throws tileattn::Error on invalid input; nothing written yet
  device.synchronize();
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  device.fetch(buf);

  TempFiles temps;
  const auto save = [&](const HostTensor& t, const std::string& path, const char* flag) {
    const std::filesystem::path tmp = temps.add(path);
    try {
      save_npy(tmp, t);
    } catch (const ToolError&) {
      throw ToolError(std::string(flag) + ": cannot write " + path);
    }
    return tmp;
  };
  const std::filesystem::path out_tmp = save(buf.out, o.out, "--out");
  const std::filesystem::path lse_tmp = o.lse.empty() ? "" : save(buf.lse, o.lse, "--lse");
  std::error_code ec;
  if (!o.lse.empty()) std::filesystem::rename(lse_tmp, o.lse, ec);
  if (!ec) std::filesystem::rename(out_tmp, o.out, ec);
  if (ec) throw ToolError("cannot rename the output into place: " + ec.message());
  temps.release();

  if (o.verbose)
    std::cout << "tileattn run: " << to_string(ctx.backend) << " backend, dtype "
              << to_string(compute) << ", " << elapsed.count() * 1e3 << " ms; wrote " << o.out
              << (o.lse.empty() ? "" : " and " + o.lse) << '\n';
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
  sub->add_option("--key-lengths", o->key_lengths, "Valid key lengths .npy, int32/int64 [B]");
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
  sub->add_flag("--verbose,-v", o->verbose, "Print the backend, time and files written");
  return {sub, [o] { return run(*o); }};
}

}  // namespace tileattn::tools
