// The serving entry points: attention_with_kvcache and apply_rotary (validation, then the host
// backends or CUDA).
#include "api/dispatch.hpp"
#include "api/validate_kvcache.hpp"
#include "cpu/decode.hpp"
#include "cpu/kvcache_append.hpp"
#include "reference/reference_kvcache.hpp"
#include "tileattn/tileattn.hpp"

#if defined(TILEATTN_WITH_CUDA)
#include "cuda/cuda_kvcache.hpp"
#endif

namespace tileattn {

void apply_rotary(const RotaryArgs& args, const Context& ctx) {
  const detail::RotaryParams p = detail::validate_rotary(args);
  const Backend backend = detail::resolve_backend(ctx, p.device);
  if (backend == Backend::cuda) {
#if defined(TILEATTN_WITH_CUDA)
    detail::require_device_tensors(p.device);
    detail::cuda_apply_rotary(p, ctx.cuda_stream);
    return;
#else
    detail::no_cuda_backend();
#endif
  }
  detail::require_host_tensors(backend, p.device);
  detail::run_on_host([&] { detail::cpu_apply_rotary(p, ctx.threads); });
}

void attention_with_kvcache(const KvCacheArgs& args, const Context& ctx) {
  const detail::KvCacheParams p = detail::validate_kvcache(args);
  const Backend backend = detail::resolve_backend(ctx, p.attn.device);
  if (backend == Backend::cuda) {
#if defined(TILEATTN_WITH_CUDA)
    detail::require_device_tensors(p.attn.device);
    detail::cuda_attention_with_kvcache(p, ctx.cuda_stream, ctx.cuda_workspace,
                                        ctx.cuda_workspace_bytes);
    return;
#else
    detail::no_cuda_backend();
#endif
  }
  detail::require_host_tensors(backend, p.attn.device);
  detail::run_on_host([&] {
    if (p.has_new()) detail::cpu_kvcache_append(p, ctx.threads);
    if (backend == Backend::reference)
      detail::reference_kvcache(p, ctx.threads);
    else
      detail::cpu_kvcache_attention(p, ctx.threads, ctx.cpu_isa);
  });
}

std::size_t attention_with_kvcache_workspace_bytes(const KvCacheArgs& args, const Context& ctx) {
  const detail::KvCacheParams p = detail::validate_kvcache(args);
  if (detail::resolve_backend(ctx, p.attn.device) != Backend::cuda || p.attn.device != Device::cuda)
    return 0;
#if defined(TILEATTN_WITH_CUDA)
  return detail::cuda_kvcache_workspace_bytes(p);
#else
  return 0;
#endif
}

}  // namespace tileattn
