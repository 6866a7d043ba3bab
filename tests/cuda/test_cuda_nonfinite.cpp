// Non-finite inputs on the CUDA backend against the reference's rules (docs/semantics.md,
// "Non-finite values"), with the CPU suite's canaries (tests/cpu/nonfinite_case.hpp): NaN, Inf
// and garbage in every masked-position class, and at random visible keys, queries and (backward)
// incoming gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cuda_case.hpp"
#include "nonfinite_case.hpp"

namespace tileattn::test {
namespace {

class CudaNonFinite : public testing::TestWithParam<Case> {};

// The forward on the device: every tensor of `args` copied there, out and lse back.
void cuda_forward(const Problem& pb, HostTensor& out, HostTensor& lse) {
  AttentionArgs a = pb.args(out, &lse);
  std::vector<std::unique_ptr<DeviceTensor>> keep;
  const auto to_device = [&](Tensor& t, const HostTensor& host) {
    if (!t.present()) return;
    keep.push_back(std::make_unique<DeviceTensor>(host));
    t = keep.back()->view();
  };
  to_device(a.q, pb.q);
  to_device(a.k, pb.k);
  to_device(a.v, pb.v);
  to_device(a.out, out);
  to_device(a.lse, lse);
  to_device(a.mask, pb.mask);
  to_device(a.key_lengths, pb.key_lengths);
  to_device(a.alibi_slopes, pb.alibi);
  Context ctx;
  ctx.backend = Backend::cuda;
  attention_forward(a, ctx);
  if (cudaDeviceSynchronize() != cudaSuccess) throw Error("test: kernel failed");
  keep[3]->download(out);
  keep[4]->download(lse);
}

// Whether the forward of 16-bit storage runs the Hopper kernel, which implements these rules
// but one (docs/semantics.md: a visible score of -inf weighs 0 there): a Hopper device without
// TILEATTN_CUDA_DISABLE_SM90=1.
bool sm90_forward_dispatch() {
  const char* disabled = std::getenv("TILEATTN_CUDA_DISABLE_SM90");
  if (disabled != nullptr && std::string(disabled) == "1") return false;
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess)
    return false;
  return major == 9;
}

// The sm80 forward (every dtype; on Hopper under TILEATTN_CUDA_DISABLE_SM90=1, as the second
// pass of scripts/gpu/check.sh runs), f32 storage on any device, and the Hopper kernel for
// 16-bit storage on masked keys and non-finite V anywhere (the "anywhere" canaries also put
// +-Inf into q and k, whose visible -inf scores the Hopper kernel does not poison).
TEST_P(CudaNonFinite, ForwardMatchesReferenceRules) {
  TILEATTN_REQUIRE_CUDA();
  TILEATTN_TRACE_SEED();
  const Case& c = GetParam();
  Rng rng = make_rng();
  const bool sm90 = sm90_forward_dispatch();
  for (Poison mode : {Poison::masked_keys, Poison::anywhere, Poison::values})
    for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
      if (sm90 && dtype != DType::f32 && mode == Poison::anywhere) continue;
      SCOPED_TRACE(std::string(to_string(mode)) + " " + to_string(dtype));
      Problem pb(c, dtype, rng);
      poison_inputs(pb, nullptr, mode, rng);
      const HostTensor ref_out = pb.make_out(), ref_lse = pb.make_lse();
      attention_forward(pb.args(ref_out, &ref_lse), {Backend::reference, 0});
      HostTensor out = pb.make_out(), lse = pb.make_lse();
      cuda_forward(pb, out, lse);
      // 16-bit operands (f32 storage too): the tolerance is for the NaN pattern, not accuracy.
      expect_matches(out.to_f32(), ref_out.to_f32(), 5e-2, 1e-4, "out");
      expect_matches(lse.to_f32(), ref_lse.to_f32(), 0.0, 5e-2, "lse");
    }
}

// Whether the backward of 16-bit storage may run the Hopper kernel, which does not implement
// these rules yet (docs/semantics.md): a Hopper device without TILEATTN_CUDA_DISABLE_SM90=1, the
// fast score path (no mask, softcap, ALiBi or dropout) and D, Dv <= 128 (cuda_backward.cu; its
// alignment conditions hold for these cases' layouts, and where they would not, skipping is
// merely conservative).
bool sm90_backward_dispatch(const Case& c, std::int64_t dim, std::int64_t dim_v) {
  const bool general =
      c.mask != MaskKind::none || c.softcap > 0.0f || c.alibi != Alibi::none || c.dropout > 0.0f;
  return !general && std::max(dim, dim_v) <= 128 && sm90_forward_dispatch();
}

// The backward on the device with the given out and lse: every tensor of `host` copied there,
// dq, dk and dv (poisoned beforehand) back.
void cuda_backward(const Problem& pb, const AttentionBackwardArgs& host, const HostTensor& out,
                   const HostTensor& lse, const HostTensor& dout, std::vector<HostTensor>& grads,
                   bool deterministic) {
  AttentionBackwardArgs a = host;
  a.deterministic = deterministic;
  std::vector<std::unique_ptr<DeviceTensor>> keep;
  const auto to_device = [&](Tensor& t, const HostTensor& h) {
    if (!t.present()) return;
    keep.push_back(std::make_unique<DeviceTensor>(h));
    t = keep.back()->view();
  };
  to_device(a.q, pb.q);
  to_device(a.k, pb.k);
  to_device(a.v, pb.v);
  to_device(a.mask, pb.mask);
  to_device(a.key_lengths, pb.key_lengths);
  to_device(a.alibi_slopes, pb.alibi);
  to_device(a.out, out);
  to_device(a.lse, lse);
  to_device(a.dout, dout);
  Tensor* const outputs[3] = {&a.dq, &a.dk, &a.dv};
  const std::size_t first_grad = keep.size();
  for (int n = 0; n < 3; ++n) to_device(*outputs[n], grads[static_cast<std::size_t>(n)]);
  Context ctx;
  ctx.backend = Backend::cuda;
  attention_backward(a, ctx);
  if (cudaDeviceSynchronize() != cudaSuccess) throw Error("test: kernel failed");
  for (std::size_t n = 0; n < 3; ++n) keep[first_grad + n]->download(grads[n]);
}

// The sm80 backward (every dtype; on Hopper under TILEATTN_CUDA_DISABLE_SM90=1) against the
// reference backward's gradients, with out and lse from the reference forward, so that the
// backward alone is checked (as a rule-following forward, it leaves lse NaN for every row that
// sees a non-finite q, k, v or score). Each case runs at its own head dim and at 128 and 256,
// by default and in deterministic mode: the 2-D kernel (D <= 128) and the 1-D kernel's fast
// path (D 256, deterministic) and general path (masks, softcap, ALiBi, dropout). 16-bit storage
// on the Hopper kernel is skipped until that kernel implements the rules.
TEST_P(CudaNonFinite, BackwardMatchesReferenceRules) {
  TILEATTN_REQUIRE_CUDA();
  TILEATTN_TRACE_SEED();
  Rng rng = make_rng();
  for (const std::int64_t dim : {GetParam().D, std::int64_t{128}, std::int64_t{256}}) {
    Case c = GetParam();
    c.D = dim;  // (a case's own Dv stays)
    const std::int64_t dim_v = c.Dv == 0 ? c.D : c.Dv;
    const bool sm90 = sm90_backward_dispatch(c, c.D, dim_v);
    for (Poison mode : {Poison::masked_keys, Poison::anywhere})
      for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
        if (sm90 && dtype != DType::f32) continue;
        SCOPED_TRACE(std::string(to_string(mode)) + " " + to_string(dtype) + " D " +
                     std::to_string(c.D) + " Dv " + std::to_string(dim_v));
        Problem pb(c, dtype, rng);
        HostTensor dout = HostTensor::operand(dtype, c.B, c.Lq, c.Hq, pb.Dv, c.layout);
        dout.fill_normal(rng);
        poison_inputs(pb, &dout, mode, rng);
        const HostTensor out = pb.make_out(), lse = pb.make_lse();
        attention_forward(pb.args(out, &lse), {Backend::reference, 0});
        AttentionBackwardArgs g;
        static_cast<AttentionArgs&>(g) = pb.args(out, &lse);
        g.dout = dout.view();
        const auto gradients = [&] {
          std::vector<HostTensor> grads = {
              HostTensor::operand(DType::f32, c.B, c.Lq, c.Hq, c.D, c.layout),
              HostTensor::operand(DType::f32, c.B, c.Lk, c.Hkv, c.D, c.layout),
              HostTensor::operand(DType::f32, c.B, c.Lk, c.Hkv, pb.Dv, c.layout)};
          for (HostTensor& t : grads) t.poison();
          return grads;
        };
        std::vector<HostTensor> ref = gradients();
        g.dq = ref[0].view();
        g.dk = ref[1].view();
        g.dv = ref[2].view();
        attention_backward(g, {Backend::reference, 0});
        for (const bool deterministic : {false, true}) {
          SCOPED_TRACE(deterministic ? "deterministic" : "default");
          std::vector<HostTensor> got = gradients();
          cuda_backward(pb, g, out, lse, dout, got, deterministic);
          // 16-bit operands (f32 storage too): the tolerance is for the NaN pattern, not
          // accuracy.
          expect_matches(got[0].to_f32(), ref[0].to_f32(), 5e-2, 1e-4, "dq");
          expect_matches(got[1].to_f32(), ref[1].to_f32(), 5e-2, 1e-4, "dk");
          expect_matches(got[2].to_f32(), ref[2].to_f32(), 5e-2, 1e-4, "dv");
        }
      }
  }
}

INSTANTIATE_TEST_SUITE_P(All, CudaNonFinite, testing::ValuesIn(poison_cases().cases),
                         [](const testing::TestParamInfo<Case>& param_info) {
                           return param_info.param.name;
                         });

}  // namespace
}  // namespace tileattn::test
