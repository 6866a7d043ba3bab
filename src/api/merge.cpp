// merge_attention_states: validation, then the host loop or the CUDA kernel.
#include <new>

#include "api/validate_merge.hpp"
#include "cpu/merge_states.hpp"
#include "tileattn/tileattn.hpp"

#if defined(TILEATTN_WITH_CUDA)
#include "cuda/cuda_forward.hpp"
#endif

namespace tileattn {

void merge_attention_states(std::span<const Tensor> outs, std::span<const Tensor> lses,
                            const Tensor& out, const Tensor& lse, const Context& ctx) {
  const detail::MergeParams p = detail::validate_merge(outs, lses, out, lse);
  if (ctx.threads < 0 || ctx.threads > kMaxThreads)
    throw Error("tileattn: argument 'ctx.threads': must be in [0, " + std::to_string(kMaxThreads) +
                "] (0 = default), got " + std::to_string(ctx.threads));
  const bool wants_cuda = ctx.backend == Backend::cuda ||
                          (ctx.backend == Backend::automatic && p.device == Device::cuda);
  if (wants_cuda != (p.device == Device::cuda))
    throw Error(std::string("tileattn: argument 'ctx.backend': the ") + to_string(ctx.backend) +
                " backend cannot merge " + (p.device == Device::cuda ? "device" : "host") +
                " tensors");
  if (p.device == Device::cuda) {
#if defined(TILEATTN_WITH_CUDA)
    detail::cuda_merge_states(p, ctx.cuda_stream);
    return;
#else
    throw Error("tileattn: argument 'out': CUDA tensors, but this build has no CUDA backend");
#endif
  }
  try {
    detail::cpu_merge_states(p, ctx.threads);
  } catch (const std::bad_alloc&) {
    throw Error("tileattn: out of host memory for the call's buffers");
  }
}

void merge_attention_states(const Tensor& out_a, const Tensor& lse_a, const Tensor& out_b,
                            const Tensor& lse_b, const Tensor& out, const Tensor& lse,
                            const Context& ctx) {
  const Tensor outs[] = {out_a, out_b};
  const Tensor lses[] = {lse_a, lse_b};
  merge_attention_states(outs, lses, out, lse, ctx);
}

}  // namespace tileattn
