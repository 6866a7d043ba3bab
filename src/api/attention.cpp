// Public entry points: argument validation, then dispatch to a backend.
#include <algorithm>
#include <string>

#include "api/dispatch.hpp"
#include "api/validate.hpp"
#include "common/threads.hpp"
#include "common/varlen.hpp"
#include "cpu/flash_backward.hpp"
#include "cpu/flash_forward.hpp"
#include "reference/reference_forward.hpp"
#include "tileattn/tileattn.hpp"

#if defined(TILEATTN_WITH_CUDA)
#include "cuda/cuda_forward.hpp"
#endif

namespace tileattn {

const char* to_string(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::boolean: return "boolean";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
  }
  return "unknown";
}

std::size_t size_of(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32:
    case DType::i32: return 4;
    case DType::f16:
    case DType::bf16: return 2;
    case DType::boolean: return 1;
    case DType::i64: return 8;
  }
  return 1;
}

const char* to_string(CpuIsa isa) noexcept {
  switch (isa) {
    case CpuIsa::amx_bf16: return "amx_bf16";
    case CpuIsa::avx512_bf16: return "avx512_bf16";
    case CpuIsa::avx512: return "avx512";
    case CpuIsa::avx2: return "avx2";
    case CpuIsa::portable: return "portable";
    case CpuIsa::best: return "best";
  }
  return "unknown";
}

const char* to_string(Backend backend) noexcept {
  switch (backend) {
    case Backend::automatic: return "auto";
    case Backend::cpu: return "cpu";
    case Backend::reference: return "reference";
    case Backend::cuda: return "cuda";
  }
  return "unknown";
}

Tensor make_tensor(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                   Device device, int device_index) {
  if (shape.size() < 1 || shape.size() > 4) throw Error("tileattn: make_tensor: rank must be 1..4");
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.device_index = device_index;
  t.rank = static_cast<int>(shape.size());
  std::copy(shape.begin(), shape.end(), t.shape);
  std::int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.stride[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

Tensor make_tensor(const void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                   Device device, int device_index) {
  return make_tensor(const_cast<void*>(data), dtype, shape, device, device_index);
}

Tensor bhsd_as_bshd(Tensor bhsd) {
  if (bhsd.rank != 4) throw Error("tileattn: bhsd_as_bshd: expected a rank-4 [B, H, L, D] tensor");
  std::swap(bhsd.shape[1], bhsd.shape[2]);
  std::swap(bhsd.stride[1], bhsd.stride[2]);
  return bhsd;
}

void attention_forward(const AttentionArgs& args, const Context& ctx) {
  const detail::AttnParams p = detail::validate_forward(args);
  const Backend backend = detail::resolve_backend(ctx, p.device);

  if (backend == Backend::cuda) {
#if defined(TILEATTN_WITH_CUDA)
    detail::require_device_tensors(p.device);
    detail::cuda_flash_forward(p, ctx.cuda_stream, ctx.cuda_f32_via_bf16);
    return;
#else
    detail::no_cuda_backend();
#endif
  }
  detail::require_host_tensors(backend, p.device);
  const auto run = [&](const detail::AttnParams& call) {
    if (call.len_q == 0) return;
    if (backend == Backend::reference)
      detail::reference_forward(call, ctx.threads);
    else
      detail::cpu_flash_forward(call, ctx.threads, ctx.cpu_isa);
  };
  detail::run_on_host([&] {
    if (!p.is_varlen()) return run(p);
    for (std::int64_t b = 0; b < p.batch; ++b) run(detail::sequence_view(p, b));
  });
}

void attention_backward(const AttentionBackwardArgs& args, const Context& ctx) {
  const detail::AttnBackwardParams p = detail::validate_backward(args);
  const Backend backend = detail::resolve_backend(ctx, p.device);
  if (backend == Backend::cuda) {
#if defined(TILEATTN_WITH_CUDA)
    detail::require_device_tensors(p.device);
    detail::cuda_flash_backward(p, ctx.cuda_stream, ctx.cuda_f32_via_bf16, ctx.cuda_workspace,
                                ctx.cuda_workspace_bytes);
    return;
#else
    detail::no_cuda_backend();
#endif
  }
  detail::require_host_tensors(backend, p.device);
  const auto run = [&](const detail::AttnBackwardParams& call) {
    if (backend == Backend::reference)
      detail::reference_backward(call, ctx.threads);
    else
      detail::cpu_flash_backward(call, ctx.threads, ctx.cpu_isa);
  };
  detail::run_on_host([&] {
    if (!p.is_varlen()) return run(p);
    for (std::int64_t b = 0; b < p.batch; ++b) run(detail::sequence_view(p, b));
  });
}

std::size_t attention_backward_workspace_bytes(const AttentionBackwardArgs& args,
                                               const Context& ctx) {
  const detail::AttnBackwardParams p = detail::validate_backward(args);
  if (detail::resolve_backend(ctx, p.device) != Backend::cuda || p.device != Device::cuda) return 0;
#if defined(TILEATTN_WITH_CUDA)
  return detail::cuda_backward_workspace_bytes(p, ctx.cuda_f32_via_bf16);
#else
  return 0;
#endif
}

BuildInfo build_info() {
  BuildInfo info;
  info.version = TILEATTN_VERSION;
#if defined(__clang__)
  info.compiler = "clang " __clang_version__;
#elif defined(__GNUC__)
  info.compiler = "gcc " __VERSION__;
#else
  info.compiler = "unknown";
#endif
#if defined(_OPENMP)
  info.openmp = true;
#endif
#if defined(TILEATTN_WITH_CUDA)
  info.cuda = true;
#endif
  info.best_cpu_isa = detail::detect_cpu_isa();
  info.max_threads = detail::resolve_threads(0);
  return info;
}

}  // namespace tileattn
