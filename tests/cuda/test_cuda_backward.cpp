// The CUDA backward (Backend::cuda) against the double-precision reference backward: every
// feature, every head-dim bucket and awkward shapes (several key and query blocks, partial
// blocks), f16, bf16 and f32 storage, and determinism (identical bits from run to run).
// Inputs are the CPU suite's BackwardProblem (fresh random q, k, v, dout; out and lse from the CPU
// forward), copied byte for byte to the device; the gradients are poisoned (NaN) there.
// Tolerances (FlashAttention's rule): for 16-bit storage the kernel's own error (the reference's
// exact out fed in) within 2x the naive same-precision backward's, and with the forward's 16-bit
// out within 4x (delta = rowsum(dO o O) carries out's rounding); f32 storage (the f32 kernels)
// takes out and lse from the CUDA forward and must stay within 2x the naive f32 backward's error.
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backward_case.hpp"
#include "cuda_case.hpp"

namespace tileattn::test {
namespace {

// kErrorFloor: an absolute L2 error allowance (compare() reports the absolute L2 error when the
// reference is exactly 0, e.g. dq and dk with a single key, where dP - delta cancels only up to
// f32 rounding).
// With the forward's 16-bit out, the bar is the naive backward that takes delta from the same
// rounded out (out's rounding dominates delta when Dv is tiny).
constexpr double kNaiveFactor = 2.0, kErrorFloor = 1e-4;

std::vector<Case> backward_cases() {
  CaseList list;
  const auto add = [&](const std::string& name, const std::function<void(Case&)>& tweak) {
    list.add(name, tweak);
  };
  add("Small_plain", [](Case& c) { c.B = 2, c.Lq = c.Lk = 64, c.Hq = c.Hkv = 3, c.D = 64; });
  add("Small_causal_gqa",
      [](Case& c) { c.Lq = c.Lk = 150, c.Hq = 4, c.Hkv = 2, c.D = 128, c.causal = true; });
  add("Small_everything", [](Case& c) {
    c.B = 2, c.Lq = 77, c.Lk = 140, c.Hq = 4, c.Hkv = 2, c.D = 72, c.Dv = 40, c.causal = true;
    c.window_left = 50, c.mask = MaskKind::additive_full, c.key_lengths = KeyLengths::i64;
    c.softcap = 8.0f, c.alibi = Alibi::batch_heads, c.dropout = 0.2f, c.layout = Layout::padded;
  });
  add("single_query_key", [](Case& c) { c.Lq = c.Lk = 1, c.Hq = c.Hkv = 4; });
  add("single_query", [](Case& c) { c.Lq = 1, c.Lk = 300, c.D = 128; });
  add("single_key", [](Case& c) { c.Lq = 130, c.Lk = 1, c.D = 40; });
  add("no_keys", [](Case& c) { c.Lq = 5, c.Lk = 0, c.D = 16; });
  add("no_queries", [](Case& c) { c.Lq = 0, c.Lk = 20, c.D = 16; });
  for (const std::int64_t L : {17, 65, 129, 257, 520})
    add("len_" + std::to_string(L),
        [L](Case& c) { c.Lq = c.Lk = L, c.Hq = 2, c.Hkv = 1, c.D = 64, c.large = L > 300; });
  for (const std::int64_t D : {1, 24, 40, 80, 96, 128, 160, 200, 256})
    add("dim_" + std::to_string(D), [D](Case& c) { c.Lq = 100, c.Lk = 150, c.D = D; });
  add("dv_lt_d", [](Case& c) { c.Lq = 70, c.Lk = 90, c.D = 128, c.Dv = 64; });
  add("dv_gt_d", [](Case& c) { c.Lq = 70, c.Lk = 90, c.D = 24, c.Dv = 200; });
  add("causal_bottom_right", [](Case& c) { c.B = 2, c.Lq = c.Lk = 200, c.causal = true; });
  add("causal_top_left",
      [](Case& c) { c.Lq = c.Lk = 200, c.causal = true, c.alignment = Alignment::top_left; });
  add("causal_br_lq_gt_lk", [](Case& c) { c.Lq = 190, c.Lk = 70, c.causal = true; });
  add("causal_br_lq_lt_lk", [](Case& c) { c.Lq = 70, c.Lk = 230, c.causal = true; });
  add("causal_tl_lq_gt_lk",
      [](Case& c) { c.Lq = 190, c.Lk = 70, c.causal = true, c.alignment = Alignment::top_left; });
  add("window", [](Case& c) { c.Lq = 170, c.Lk = 190, c.window_left = 30, c.window_right = 5; });
  add("window_left_only", [](Case& c) { c.Lq = 170, c.Lk = 250, c.window_left = 70; });
  add("causal_window_d128",
      [](Case& c) { c.Lq = c.Lk = 300, c.D = 128, c.causal = true, c.window_left = 100; });
  add("mask_bool_full", [](Case& c) {
    c.B = 2, c.Lq = 80, c.Lk = 130, c.Hq = 3, c.Hkv = 1, c.mask = MaskKind::bool_full;
  });
  add("mask_key_padding",
      [](Case& c) { c.B = 2, c.Lq = 80, c.Lk = 130, c.mask = MaskKind::bool_key_padding; });
  add("mask_additive_2d", [](Case& c) { c.Lq = 80, c.Lk = 130, c.mask = MaskKind::additive_2d; });
  add("key_lengths_causal_i32", [](Case& c) {
    c.B = 3, c.Lq = 90, c.Lk = 140, c.causal = true, c.key_lengths = KeyLengths::i32;
  });
  add("softcap", [](Case& c) { c.Lq = 100, c.Lk = 120, c.softcap = 5.0f, c.scale = 0.5f; });
  add("alibi_causal", [](Case& c) {
    c.B = 2, c.Lq = c.Lk = 120, c.Hq = 4, c.Hkv = 2, c.alibi = Alibi::batch_heads, c.causal = true;
  });
  add("scale_negative", [](Case& c) { c.Lq = c.Lk = 100, c.D = 64, c.scale = -0.3f; });
  add("dropout", [](Case& c) {
    c.B = 2, c.Lq = 140, c.Lk = 190, c.Hq = 4, c.Hkv = 2, c.D = 64, c.dropout = 0.3f;
  });
  add("dropout_causal_d256",
      [](Case& c) { c.Lq = c.Lk = 150, c.D = 256, c.causal = true, c.dropout = 0.5f; });
  add("mqa", [](Case& c) { c.B = 2, c.Lq = c.Lk = 130, c.Hq = 6, c.Hkv = 1; });
  add("layout_bhsd",
      [](Case& c) { c.B = 2, c.Lq = 70, c.Lk = 90, c.Hq = 4, c.Hkv = 2, c.layout = Layout::bhsd; });
  add("layout_padded_window", [](Case& c) {
    c.Lq = 170, c.Lk = 190, c.Hq = 6, c.Hkv = 2, c.D = 80, c.Dv = 48, c.window_left = 20,
    c.window_right = 5, c.layout = Layout::padded_bshd;
  });
  add("out_f32", [](Case& c) { c.Lq = c.Lk = 100, c.D = 64, c.out = OutDType::f32; });
  add("long_causal", [](Case& c) {
    c.Lq = c.Lk = 1000, c.Hq = 2, c.Hkv = 1, c.D = 128, c.causal = true, c.large = true;
  });
  return list.cases;
}

struct DeviceGradients {
  explicit DeviceGradients(const BackwardProblem::Gradients& g) : dq(g.dq), dk(g.dk), dv(g.dv) {}
  void download(BackwardProblem::Gradients& g) const {
    dq.download(g.dq);
    dk.download(g.dk);
    dv.download(g.dv);
  }
  DeviceTensor dq, dk, dv;
};

// The device copies of a BackwardProblem's inputs and the arguments that bind them.
struct DeviceProblem {
  explicit DeviceProblem(const BackwardProblem& bp)
      : q(bp.problem.q),
        k(bp.problem.k),
        v(bp.problem.v),
        mask(bp.problem.mask),
        key_lengths(bp.problem.key_lengths),
        alibi(bp.problem.alibi),
        out(bp.out),
        lse(bp.lse),
        dout(bp.dout) {}

  // host_args: the host call's arguments (options, seeds); `out_override` replaces out.
  AttentionBackwardArgs args(const AttentionBackwardArgs& host_args, const DeviceGradients& g,
                             const DeviceTensor* out_override = nullptr) const {
    AttentionBackwardArgs a = host_args;
    a.q = q.view();
    a.k = k.view();
    a.v = v.view();
    if (a.mask.present()) a.mask = mask.view();
    if (a.key_lengths.present()) a.key_lengths = key_lengths.view();
    if (a.alibi_slopes.present()) a.alibi_slopes = alibi.view();
    a.out = out_override != nullptr ? out_override->view() : out.view();
    a.lse = lse.view();
    a.dout = dout.view();
    a.dq = g.dq.view();
    a.dk = g.dk.view();
    a.dv = g.dv.view();
    return a;
  }

  // Replaces out and lse by the CUDA forward's (what a GPU training step feeds the backward).
  void forward_on_device(const AttentionBackwardArgs& host_args) {
    AttentionArgs a = host_args;
    a.q = q.view();
    a.k = k.view();
    a.v = v.view();
    if (a.mask.present()) a.mask = mask.view();
    if (a.key_lengths.present()) a.key_lengths = key_lengths.view();
    if (a.alibi_slopes.present()) a.alibi_slopes = alibi.view();
    a.out = out.view();
    a.lse = lse.view();
    Context ctx;
    ctx.backend = Backend::cuda;
    attention_forward(a, ctx);
  }

  DeviceTensor q, k, v, mask, key_lengths, alibi, out, lse, dout;
};

void run_on_device(const AttentionBackwardArgs& args) {
  Context ctx;
  ctx.backend = Backend::cuda;
  attention_backward(args, ctx);
  const cudaError_t status = cudaDeviceSynchronize();
  ASSERT_EQ(status, cudaSuccess) << cudaGetErrorString(status);
}

// gradient_dtype: the dtype of dq, dk and dv (default: the inputs').
void run_cuda_backward_case(const Case& c, DType dtype, bool deterministic,
                            std::optional<DType> gradient_dtype = std::nullopt) {
  Rng rng = make_rng();
  const BackwardProblem bp(c, dtype, CpuIsa::best, rng);
  const std::int64_t Dv = bp.problem.Dv;

  BackwardProblem::Gradients ref{HostTensor::contiguous(DType::f32, {c.B, c.Lq, c.Hq, c.D}),
                                 HostTensor::contiguous(DType::f32, {c.B, c.Lk, c.Hkv, c.D}),
                                 HostTensor::contiguous(DType::f32, {c.B, c.Lk, c.Hkv, Dv})};
  attention_backward(bp.args(ref, false), {Backend::reference, 2});

  const DType grad_dtype = gradient_dtype.value_or(dtype);
  BackwardProblem::Gradients got = bp.make_gradients(grad_dtype);
  const AttentionBackwardArgs host_args = bp.args(got, deterministic);
  SCOPED_TRACE(describe(host_args));
  DeviceProblem dev(bp);
  // f32 storage: out and lse come from the CUDA forward, as in a GPU training step (the f32
  // kernels' own forward and backward are exercised together).
  if (dtype == DType::f32) dev.forward_on_device(host_args);
  const DeviceGradients dev_got(got);
  run_on_device(dev.args(host_args, dev_got));
  dev_got.download(got);

  // The kernel's own error: the same call with the reference forward's exact (f32) out.
  const bool rounded_out = bp.problem.out_dtype != DType::f32;
  BackwardProblem::Gradients own = bp.make_gradients(grad_dtype);
  if (rounded_out) {
    HostTensor exact_out = HostTensor::contiguous(DType::f32, {c.B, c.Lq, c.Hq, Dv});
    AttentionBackwardArgs exact = bp.args(own, deterministic);
    exact.out = exact_out.view();
    exact.lse = {};
    attention_forward(exact, {Backend::reference, 2});
    const DeviceTensor exact_dev(exact_out);
    const DeviceGradients dev_own(own);
    run_on_device(dev.args(host_args, dev_own, &exact_dev));
    dev_own.download(own);
  }

  // The error bar: the naive backward at the storage precision.
  NaiveGradients naive, naive_given_out;
  // (f32 storage with a 16-bit out is no case here: the device's out, from the CUDA forward,
  // would not be the host's.)
  ASSERT_FALSE(rounded_out && dtype == DType::f32);
  if (rounded_out) naive_given_out = naive_attention_backward(host_args, NaiveDelta::given_out);
  naive = naive_attention_backward(host_args);

  const struct {
    const char* name;
    const HostTensor& got;
    const HostTensor& own;
    const HostTensor& ref;
    const std::vector<float>& naive;
    const std::vector<float>& naive_given_out;
  } checks[] = {{"dq", got.dq, own.dq, ref.dq, naive.dq, naive_given_out.dq},
                {"dk", got.dk, own.dk, ref.dk, naive.dk, naive_given_out.dk},
                {"dv", got.dv, own.dv, ref.dv, naive.dv, naive_given_out.dv}};
  std::cout << "[ stats ] cuda backward " << to_string(dtype) << " " << c.name
            << (deterministic ? " deterministic" : "");
  for (const auto& check : checks) {
    SCOPED_TRACE(check.name);
    EXPECT_TRUE(check.got.padding_intact()) << "written outside its logical elements";
    const std::vector<float> reference = check.ref.to_f32();
    const ErrorStats stats = compare(check.got.to_f32(), reference);
    const ErrorStats naive_stats = compare(check.naive, reference);
    EXPECT_EQ(stats.nonfinite, 0)
        << "NaN/inf (poison left unwritten?) where the reference is finite; " << stats.str();
    const ErrorStats own_stats = rounded_out ? compare(check.own.to_f32(), reference) : stats;
    EXPECT_EQ(own_stats.nonfinite, 0) << own_stats.str();
    EXPECT_LE(own_stats.rel_l2, kNaiveFactor * naive_stats.rel_l2 + kErrorFloor)
        << "kernel (exact out): " << own_stats.str() << "\nnaive: " << naive_stats.str();
    const ErrorStats given_out_stats =
        rounded_out ? compare(check.naive_given_out, reference) : naive_stats;
    EXPECT_LE(stats.rel_l2, kNaiveFactor * given_out_stats.rel_l2 + kErrorFloor)
        << "kernel (the forward's out): " << stats.str()
        << "\nnaive, delta from the same out: " << given_out_stats.str();
    std::cout << " " << check.name << " " << stats.rel_l2 << " (own " << own_stats.rel_l2
              << ", naive " << naive_stats.rel_l2 << ")";
  }
  std::cout << "\n";
}

using Param = std::tuple<DType, Case>;

class CudaBackward : public ::testing::TestWithParam<Param> {};

TEST_P(CudaBackward, MatchesReference) {
  TILEATTN_REQUIRE_CUDA();
  TILEATTN_TRACE_SEED();
  const auto& [dtype, c] = GetParam();
  run_cuda_backward_case(c, dtype, false);
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const auto& [dtype, c] = info.param;
  return c.name + "_" + to_string(dtype);
}

INSTANTIATE_TEST_SUITE_P(All, CudaBackward,
                         ::testing::Combine(::testing::Values(DType::bf16, DType::f16, DType::f32),
                                            ::testing::ValuesIn(backward_cases())),
                         param_name);

// Gradients of another dtype than the inputs: f32 gradients take the kernels' per-element
// dK / dV epilogue (and the scalar dQ conversion), 16-bit ones of the other 16-bit type the
// staged epilogue with a conversion other than the kernel's element type; a row length that is
// no multiple of 128 bytes (D 72) and partial key blocks.
TEST(CudaBackwardGradientDtypes, Small_MixedWithInputs) {
  TILEATTN_REQUIRE_CUDA();
  TILEATTN_TRACE_SEED();
  Case c;
  c.name = "gradient_dtypes";
  c.B = 2, c.Lq = 150, c.Lk = 300, c.Hq = 4, c.Hkv = 2, c.causal = true;
  const std::pair<DType, DType> pairs[] = {{DType::bf16, DType::f32},
                                           {DType::f16, DType::f32},
                                           {DType::bf16, DType::f16},
                                           {DType::f16, DType::bf16}};
  for (const auto& [inputs, gradients] : pairs)
    for (const int dim : {72, 128}) {
      c.D = dim;
      SCOPED_TRACE(std::string("inputs ") + to_string(inputs) + ", gradients " +
                   to_string(gradients) + ", D " + std::to_string(dim));
      run_cuda_backward_case(c, inputs, false, gradients);
    }
}

// Deterministic mode: still correct, and the same bits from run to run (several key blocks add
// to each query block's dQ, with GQA, causal/window edges and partial blocks). D 64 and 128:
// both sm90 instantiations on Hopper.
TEST(CudaBackwardDeterminism, Small_IdenticalBits) {
  TILEATTN_REQUIRE_CUDA();
  TILEATTN_TRACE_SEED();
  for (const int dim : {64, 128}) {
    for (const bool causal : {false, true}) {
      Case c;
      c.name = std::string(causal ? "causal" : "plain") + " D " + std::to_string(dim);
      c.B = 2, c.Lq = 333, c.Lk = 400, c.Hq = 4, c.Hkv = 2, c.D = dim, c.causal = causal;
      c.window_left = causal ? 150 : -1;
      run_cuda_backward_case(c, DType::bf16, true);

      Rng rng = make_rng();
      const BackwardProblem bp(c, DType::bf16, CpuIsa::best, rng);
      const DeviceProblem dev(bp);
      std::vector<std::uint8_t> first;
      for (int run = 0; run < 4; ++run) {
        BackwardProblem::Gradients g = bp.make_gradients();
        const DeviceGradients dev_g(g);
        run_on_device(dev.args(bp.args(g, true), dev_g));
        dev_g.download(g);
        std::vector<std::uint8_t> bytes = g.dq.bytes();
        bytes.insert(bytes.end(), g.dk.bytes().begin(), g.dk.bytes().end());
        bytes.insert(bytes.end(), g.dv.bytes().begin(), g.dv.bytes().end());
        if (run == 0)
          first = bytes;
        else
          EXPECT_TRUE(bytes == first) << c.name << ", run " << run << ": gradients differ";
      }
    }
  }
}

}  // namespace
}  // namespace tileattn::test
