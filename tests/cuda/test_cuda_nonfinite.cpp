// Non-finite inputs on the CUDA backend against the reference's rules (docs/semantics.md,
// "Non-finite values"), with the CPU suite's canaries (tests/cpu/nonfinite_case.hpp): NaN, Inf
// and garbage in every masked-position class, at random visible keys and queries, and in V
// anywhere.
#include <gtest/gtest.h>

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

// Whether the forward of 16-bit storage runs the Hopper kernel, which does not implement these
// rules yet (docs/semantics.md): a Hopper device without TILEATTN_CUDA_DISABLE_SM90=1.
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
// pass of scripts/gpu/check.sh runs) and f32 storage on any device. 16-bit storage on the
// Hopper kernel is skipped until that kernel implements the rules.
TEST_P(CudaNonFinite, ForwardMatchesReferenceRules) {
  TILEATTN_REQUIRE_CUDA();
  TILEATTN_TRACE_SEED();
  const Case& c = GetParam();
  Rng rng = make_rng();
  const bool sm90 = sm90_forward_dispatch();
  for (Poison mode : {Poison::masked_keys, Poison::anywhere, Poison::values})
    for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
      if (sm90 && dtype != DType::f32) continue;
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

INSTANTIATE_TEST_SUITE_P(All, CudaNonFinite, testing::ValuesIn(poison_cases().cases),
                         [](const testing::TestParamInfo<Case>& param_info) {
                           return param_info.param.name;
                         });

}  // namespace
}  // namespace tileattn::test
