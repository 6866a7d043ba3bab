// Dropout drops exactly the same elements on the CUDA and CPU backends. With V = identity
// (Lk = Dv) the output row i is row i of the dropped, rescaled probability matrix, so the zeros
// of the output are the drop mask itself: they must coincide element for element.
#include <gtest/gtest.h>

#include <cstdint>

#include "cuda_case.hpp"

namespace tileattn::test {
namespace {

void check_same_mask(DType dtype, bool causal) {
  TILEATTN_TRACE_SEED();
  Rng rng = make_rng();
  constexpr std::int64_t B = 2, H = 3, Lq = 70, Lk = 64, D = 64;
  HostTensor q = HostTensor::operand(dtype, B, Lq, H, D, Layout::bshd);
  HostTensor k = HostTensor::operand(dtype, B, Lk, H, D, Layout::bshd);
  HostTensor v = HostTensor::operand(dtype, B, Lk, H, Lk, Layout::bshd);
  q.fill_normal(rng, 0.5f);
  k.fill_normal(rng, 0.5f);
  for (std::int64_t i = 0; i < v.numel(); ++i) {  // v[b][j][h][d] = (j == d)
    const std::int64_t d = i % Lk, j = (i / (Lk * H)) % Lk;
    v.set(i, j == d ? 1.0f : 0.0f);
  }
  HostTensor out_cpu = HostTensor::operand(DType::f32, B, Lq, H, Lk, Layout::bshd);
  HostTensor out_gpu = HostTensor::operand(DType::f32, B, Lq, H, Lk, Layout::bshd);
  out_cpu.poison();
  out_gpu.poison();

  AttentionArgs args;
  args.causal = causal;
  args.dropout_p = 0.5f;
  args.dropout_seed = rng();
  args.dropout_offset = rng() >> 1;
  args.q = q.view(), args.k = k.view(), args.v = v.view(), args.out = out_cpu.view();
  attention_forward(args, {Backend::cpu, 0});

  const DeviceTensor dq(q), dk(k), dv(v);
  DeviceTensor dout(out_gpu);
  args.q = dq.view(), args.k = dk.view(), args.v = dv.view(), args.out = dout.view();
  Context ctx;
  ctx.backend = Backend::cuda;
  attention_forward(args, ctx);
  TILEATTN_CUDA_CHECK(cudaDeviceSynchronize());
  dout.download(out_gpu);

  std::int64_t zeros = 0, visible = 0, mismatches = 0;
  for (std::int64_t e = 0; e < out_cpu.numel(); ++e) {
    const float a = out_cpu.get(e), b = out_gpu.get(e);
    const std::int64_t j = e % Lk, i = (e / (Lk * H)) % Lq;
    if (causal && j > i + (Lk - Lq)) continue;  // masked by causality, zero on both
    ++visible;
    zeros += a == 0.0f;
    mismatches += (a == 0.0f) != (b == 0.0f);
  }
  EXPECT_EQ(mismatches, 0) << "of " << visible << " visible elements";
  // The mask is not trivial: about half of the visible elements are dropped.
  EXPECT_GT(zeros, visible * 4 / 10);
  EXPECT_LT(zeros, visible * 6 / 10);
}

TEST(CudaDropout, Small_SameMaskAsCpu_bf16) {
  TILEATTN_REQUIRE_CUDA();
  check_same_mask(DType::bf16, false);
}

TEST(CudaDropout, Small_SameMaskAsCpu_f16_causal) {
  TILEATTN_REQUIRE_CUDA();
  check_same_mask(DType::f16, true);
}

TEST(CudaDropout, SameMaskAsCpu_f32) {  // the sm80 kernel (f32 storage)
  TILEATTN_REQUIRE_CUDA();
  check_same_mask(DType::f32, false);
}

}  // namespace
}  // namespace tileattn::test
