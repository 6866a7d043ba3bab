// tileattn verify: one backend against the double-precision reference on random inputs; with
// --backward also the gradients dq, dk, dv (the backend's backward on its own forward's out and
// lse, against the reference backward).
// Tolerances on the relative L2 error: 1e-5 for f32; 1e-2 for f16/bf16 (a coarse CLI bound: the
// test suite applies FlashAttention's stricter "2x a naive same-precision implementation" rule).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "commands.hpp"
#include "compare.hpp"
#include "cuda_staging.hpp"
#include "library_info.hpp"
#include "options.hpp"

namespace tileattn::tools {
namespace {

struct VerifyOptions {
  Problem problem;
  double tolerance = 0.0;  // 0 = by dtype
  bool backward = false;
  bool deterministic = false;
};

double default_tolerance(DType dtype) {
  return dtype == DType::f32 ? 1e-5 : 1e-2;
}

bool report(const char* name, const ErrorStats& e, double tolerance) {
  const bool ok = e.rel_l2 <= tolerance;
  std::printf("  %-4s rel L2 %.3e  max abs %.3e  (%lld values, tolerance rel L2 <= %.0e)  %s\n",
              name, e.rel_l2, e.max_abs, static_cast<long long>(e.count), tolerance,
              ok ? "ok" : "FAIL");
  return ok;
}

int verify(VerifyOptions& o) {
  Problem& p = o.problem;
  p.resolve_defaults();
  p.with_lse = true;
  if (o.deterministic && !o.backward) throw ToolError("--deterministic needs --backward");
  const Context ctx = p.context();
  // The cuda backend computes f32 storage with bf16 operands: bf16's tolerance.
  const DType tolerance_dtype =
      ctx.backend == Backend::cuda && p.dtype == "f32" ? DType::bf16 : parse_dtype(p.dtype);
  const double tolerance = o.tolerance > 0.0 ? o.tolerance : default_tolerance(tolerance_dtype);

  AttentionBuffers tested = p.make_buffers();
  AttentionArgs args = p.args();
  tested.bind(args);
  {
    const DeviceStaging device(tested, args, ctx);  // --backend cuda: device copies
    attention_forward(args, ctx);
    device.fetch(tested);
  }

  AttentionBuffers reference = tested;  // same inputs, fresh outputs
  reference.out = HostTensor(DType::f32, tested.out.shape());
  reference.lse = HostTensor(DType::f32, tested.lse.shape());
  AttentionArgs ref_args = p.args();
  reference.bind(ref_args);
  Context ref_ctx;
  ref_ctx.backend = Backend::reference;
  ref_ctx.threads = p.threads;
  attention_forward(ref_args, ref_ctx);

  const bool uses_isa = ctx.backend == Backend::cpu || ctx.backend == Backend::automatic;
  std::printf("tileattn verify: %s seed=%llu\n", p.describe().c_str(),
              static_cast<unsigned long long>(p.seed));
  std::printf("  backend %s%s%s vs reference (double precision)\n", p.backend.c_str(),
              uses_isa ? ", cpu isa " : "", uses_isa ? to_string(cpu_isa_used(ctx.cpu_isa)) : "");
  bool ok = report("out", compare(tested.out, reference.out), tolerance);
  ok = report("lse", compare(tested.lse, reference.lse), tolerance) && ok;

  if (o.backward) {
    // Both backwards take the tested forward's out and lse; the reference recomputes its
    // probabilities in double precision and returns f32 gradients.
    Problem::BackwardBuffers tested_grads = p.make_backward_buffers();
    const Problem::BackwardBuffers reference_grads = p.make_backward_buffers("f32");
    AttentionBackwardArgs backward_args;
    static_cast<AttentionArgs&>(backward_args) = p.args();
    tested.bind(backward_args);  // host buffers (the forward may have run on device copies)
    tested_grads.bind(backward_args);
    backward_args.deterministic = o.deterministic;
    {
      // --backend cuda: device copies of the inputs (out and lse included) and gradients.
      DeviceStaging device(tested, backward_args, ctx, /*upload_outputs=*/true);
      device.stage_gradients(tested_grads, backward_args);
      attention_backward(backward_args, ctx);
      device.fetch_gradients(tested_grads);
    }
    tested.bind(backward_args);  // host buffers again for the reference
    reference_grads.bind(backward_args);
    attention_backward(backward_args, ref_ctx);
    std::printf("  backward%s vs reference backward\n", o.deterministic ? " (deterministic)" : "");
    ok = report("dq", compare(tested_grads.dq, reference_grads.dq), tolerance) && ok;
    ok = report("dk", compare(tested_grads.dk, reference_grads.dk), tolerance) && ok;
    ok = report("dv", compare(tested_grads.dv, reference_grads.dv), tolerance) && ok;
  }
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

}  // namespace

Command add_verify_command(CLI::App& app) {
  auto o = std::make_shared<VerifyOptions>();
  Problem& p = o->problem;
  p.batch = 2, p.heads = 4, p.kv_heads = 2, p.len_q = 96, p.len_k = 160, p.dim = 64;
  CLI::App* sub = app.add_subcommand(
      "verify",
      "Check a backend against the reference on random inputs (exit 1 if over tolerance)");
  p.add_options(*sub);
  sub->add_option("--tolerance", o->tolerance,
                  "Max rel L2 error of out and lse (and dq, dk, dv); 0 = 1e-5 for f32, 1e-2 for "
                  "f16/bf16")
      ->capture_default_str();
  sub->add_flag("--backward", o->backward,
                "Also check the backward: dq, dk, dv against the reference backward");
  sub->add_flag("--deterministic", o->deterministic,
                "With --backward: use the deterministic backward");
  return {sub, [o] { return verify(*o); }};
}

}  // namespace tileattn::tools
