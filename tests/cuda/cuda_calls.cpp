#include "cuda_calls.hpp"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

namespace tileattn::test {
namespace {

void synchronize() {
  const cudaError_t status = cudaDeviceSynchronize();
  ASSERT_EQ(status, cudaSuccess) << cudaGetErrorString(status);
}

}  // namespace

Context cuda_context(bool via_bf16) {
  Context ctx;
  ctx.backend = Backend::cuda;
  ctx.cuda_f32_via_bf16 = via_bf16;
  return ctx;
}

// The problem's inputs (q, k, v, mask, key lengths, slopes) bound to device copies.
AttentionArgs device_inputs(const Problem& pb, AttentionArgs a, DeviceCopies& dev) {
  dev.bind(a.q, pb.q);
  dev.bind(a.k, pb.k);
  dev.bind(a.v, pb.v);
  dev.bind(a.mask, pb.mask);
  dev.bind(a.key_lengths, pb.key_lengths);
  dev.bind(a.alibi_slopes, pb.alibi);
  return a;
}

// The CUDA forward of `pb` into fresh poisoned out and lse (lse absent when the case has none).
void cuda_forward(const Problem& pb, bool via_bf16, HostTensor& out, HostTensor& lse) {
  out = pb.make_out();
  lse = pb.make_lse();
  DeviceCopies dev;
  AttentionArgs a = device_inputs(pb, pb.args(out, pb.c.lse ? &lse : nullptr), dev);
  dev.bind(a.out, out);
  const DeviceTensor& out_dev = dev.last();
  const DeviceTensor* lse_dev = nullptr;
  if (pb.c.lse) {
    dev.bind(a.lse, lse);
    lse_dev = &dev.last();
  }
  attention_forward(a, cuda_context(via_bf16));
  synchronize();
  out_dev.download(out);
  if (lse_dev != nullptr) lse_dev->download(lse);
}

// The CUDA backward with the given out and lse (host tensors, copied to the device).
Gradients cuda_backward(const Problem& pb, const HostTensor& out, const HostTensor& lse,
                        const HostTensor& dout, bool via_bf16, bool deterministic) {
  Gradients g = poisoned_gradients(pb, DType::f32);
  AttentionBackwardArgs a = backward_args(pb, out, lse, dout, g, deterministic);
  DeviceCopies dev;
  static_cast<AttentionArgs&>(a) = device_inputs(pb, a, dev);
  dev.bind(a.out, out);
  dev.bind(a.lse, lse);
  dev.bind(a.dout, dout);
  dev.bind(a.dq, g.dq);
  const DeviceTensor& dq = dev.last();
  dev.bind(a.dk, g.dk);
  const DeviceTensor& dk = dev.last();
  dev.bind(a.dv, g.dv);
  const DeviceTensor& dv = dev.last();
  attention_backward(a, cuda_context(via_bf16));
  synchronize();
  dq.download(g.dq);
  dk.download(g.dk);
  dv.download(g.dv);
  return g;
}

Gradients reference_backward(const Problem& pb, const HostTensor& dout) {
  const Case& c = pb.c;
  Gradients g{HostTensor::contiguous(DType::f32, {c.B, c.Lq, c.Hq, c.D}),
              HostTensor::contiguous(DType::f32, {c.B, c.Lk, c.Hkv, c.D}),
              HostTensor::contiguous(DType::f32, {c.B, c.Lk, c.Hkv, pb.Dv})};
  HostTensor out = pb.make_out(), lse = pb.make_lse();
  attention_backward(backward_args(pb, out, lse, dout, g, false), {Backend::reference, 0});
  return g;
}

HostTensor random_dout(const Problem& pb, Rng& rng) {
  HostTensor dout = HostTensor::operand(DType::f32, pb.c.B, pb.c.Lq, pb.c.Hq, pb.Dv, pb.c.layout);
  dout.fill_normal(rng);
  return dout;
}

}  // namespace tileattn::test
