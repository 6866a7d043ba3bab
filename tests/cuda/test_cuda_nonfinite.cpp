// Non-finite inputs on the CUDA backend against the reference's rules (docs/semantics.md,
// "Non-finite values"), with the CPU suite's canaries (tests/cpu/nonfinite_case.hpp): NaN, Inf
// and garbage in every masked-position class, at random visible keys and queries, and in V
// anywhere.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cuda_calls.hpp"
#include "cuda_case.hpp"
#include "nonfinite_case.hpp"

namespace tileattn::test {
namespace {

class CudaNonFinite : public testing::TestWithParam<Case> {};

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
      pb.c.lse = true;
      poison_inputs(pb, nullptr, mode, rng);
      const HostTensor ref_out = pb.make_out(), ref_lse = pb.make_lse();
      attention_forward(pb.args(ref_out, &ref_lse), {Backend::reference, 0});
      HostTensor out, lse;
      cuda_forward(pb, false, out, lse);
      // 16-bit operands (f32 storage too): the tolerance is for the NaN pattern, not accuracy.
      expect_matches(out.to_f32(), ref_out.to_f32(), 5e-2, 1e-4, "out");
      expect_matches(lse.to_f32(), ref_lse.to_f32(), 0.0, 5e-2, "lse");
    }
}

// The 16-bit backward kernels (sm90 where it takes the call: dout of the storage type; else the
// sm80 ones; the second pass of scripts/gpu/check.sh runs the sm80 ones on Hopper) given the
// reference's out and lse, as a training step has them from its forward: poison in every
// masked-position class changes nothing, and a non-finite V element makes exactly the
// reference's gradient rows NaN. (Poison in q or dout rows, Poison::anywhere, still reaches the
// keys such a row does not see: the kernels do not yet clean Q and dO tiles; docs/semantics.md.)
TEST_P(CudaNonFinite, BackwardMatchesReferenceRules) {
  TILEATTN_REQUIRE_CUDA();
  TILEATTN_TRACE_SEED();
  const Case& c = GetParam();
  Rng rng = make_rng();
  for (Poison mode : {Poison::masked_keys, Poison::values})
    for (DType dtype : {DType::bf16, DType::f16}) {
      SCOPED_TRACE(std::string(to_string(mode)) + " " + to_string(dtype));
      Problem pb(c, dtype, rng);
      pb.c.lse = true;
      HostTensor dout = HostTensor::operand(dtype, c.B, c.Lq, c.Hq, pb.Dv, c.layout);
      dout.fill_normal(rng);
      poison_inputs(pb, &dout, mode, rng);
      HostTensor out = pb.make_out(), lse = pb.make_lse();
      attention_forward(pb.args(out, &lse), {Backend::reference, 0});
      const Gradients ref = reference_backward(pb, dout);
      const Gradients got = cuda_backward(pb, out, lse, dout, false, false);
      // 16-bit operands: the tolerance is for the NaN pattern, not accuracy.
      expect_matches(got.dq.to_f32(), ref.dq.to_f32(), 5e-2, 1e-3, "dq");
      expect_matches(got.dk.to_f32(), ref.dk.to_f32(), 5e-2, 1e-3, "dk");
      expect_matches(got.dv.to_f32(), ref.dv.to_f32(), 5e-2, 1e-3, "dv");
    }
}

INSTANTIATE_TEST_SUITE_P(All, CudaNonFinite, testing::ValuesIn(poison_cases().cases),
                         [](const testing::TestParamInfo<Case>& param_info) {
                           return param_info.param.name;
                         });

}  // namespace
}  // namespace tileattn::test
