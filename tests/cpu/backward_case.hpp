// One CPU-backward-vs-reference check: fresh random inputs for a Case, the CPU forward for out
// and lse (as a training step would have them), a random dout, then the reference backward
// (double precision, f32 gradients), the naive same-precision backward (the error bar for
// 16-bit storage) and the CPU backward on poisoned gradients.
#pragma once

#include "attention_case.hpp"

namespace tileattn::test {

struct GradientResult {
  ErrorStats dq, dk, dv;
  ErrorStats naive_dq, naive_dk, naive_dv;
};

// Gradients are stored in the case's q dtype and layout.
GradientResult run_backward_case(const Case& c, DType dtype, CpuIsa isa, bool deterministic);

struct Gradients {
  HostTensor dq, dk, dv;
};

// dq, dk, dv of pb's shapes and layout in `dtype`, poisoned (NaN).
Gradients poisoned_gradients(const Problem& pb, DType dtype);

// The backward's arguments: the forward's (pb.args with out and lse), dout and the gradients.
AttentionBackwardArgs backward_args(const Problem& pb, const HostTensor& out, const HostTensor& lse,
                                    const HostTensor& dout, const Gradients& g, bool deterministic);

// Everything one backward call needs, with its own buffers (for the determinism tests).
struct BackwardProblem {
  BackwardProblem(const Case& c, DType dtype, CpuIsa isa, Rng& rng);
  // Fresh poisoned gradients and the arguments that bind them.
  using Gradients = test::Gradients;
  Gradients make_gradients() const;
  Gradients make_gradients(DType gradient_dtype) const;  // gradients of another float dtype
  AttentionBackwardArgs args(const Gradients& g, bool deterministic) const;

  Problem problem;
  HostTensor out, lse, dout;
};

}  // namespace tileattn::test
