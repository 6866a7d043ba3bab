// Calls of the library on a test Problem (tests/cpu/attention_case.hpp) with device copies of
// its tensors: the CUDA forward and backward (outputs poisoned, downloaded after the call), the
// reference backward, and the pieces they share. Used by the suites that run whole calls
// through the public API (f32 kernels, non-finite rules).
#pragma once

#include <memory>
#include <vector>

#include "attention_case.hpp"
#include "backward_case.hpp"
#include "cuda_case.hpp"

namespace tileattn::test {

// Device copies of a call's host tensors; `bind` points a view at the copy.
class DeviceCopies {
 public:
  void bind(Tensor& view, const HostTensor& host) {
    if (!view.present()) return;
    copies_.push_back(std::make_unique<DeviceTensor>(host));
    view = copies_.back()->view();
  }
  const DeviceTensor& last() const { return *copies_.back(); }

 private:
  std::vector<std::unique_ptr<DeviceTensor>> copies_;
};

// A CUDA context; via_bf16: Context::cuda_f32_via_bf16.
Context cuda_context(bool via_bf16);

// The problem's inputs (q, k, v, mask, key lengths, slopes) bound to device copies.
AttentionArgs device_inputs(const Problem& pb, AttentionArgs a, DeviceCopies& dev);

// The CUDA forward of `pb` into fresh poisoned out and lse (lse absent when the case has none).
void cuda_forward(const Problem& pb, bool via_bf16, HostTensor& out, HostTensor& lse);

// The CUDA backward with the given out, lse and dout (host tensors, copied to the device);
// f32 gradients, poisoned before the call.
Gradients cuda_backward(const Problem& pb, const HostTensor& out, const HostTensor& lse,
                        const HostTensor& dout, bool via_bf16, bool deterministic);

// The reference backward (it recomputes out and lse itself).
Gradients reference_backward(const Problem& pb, const HostTensor& dout);

// An f32 dout of the problem's output shape and layout, standard normal.
HostTensor random_dout(const Problem& pb, Rng& rng);

}  // namespace tileattn::test
