#include "kvcache_calls.hpp"

#include <nanobind/stl/optional.h>

#include <cstdint>
#include <optional>

#include "dlpack_tensor.hpp"
#include "tileattn/tileattn.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace tileattn::python {
namespace {

// Context's fields as the Python layer passes them (enums as their integer values).
Context context_of(int backend, int threads, int cpu_isa, std::uintptr_t stream) {
  Context ctx;
  ctx.backend = static_cast<Backend>(backend);
  ctx.threads = threads;
  ctx.cpu_isa = static_cast<CpuIsa>(cpu_isa);
  ctx.cuda_stream = reinterpret_cast<void*>(stream);
  return ctx;
}

// The arrays of KvCacheArgs, kept alive (and their views) for the call.
struct KvCacheArrays {
  ArrayView q, k_cache, v_cache, k_new, v_new, rotary_cos, rotary_sin, cache_seqlens, cache_leftpad,
      cache_batch_idx, block_table, alibi_slopes, cu_seqlens_q, cu_seqlens_k_new, out, lse;
};

void kvcache(nb::handle q, nb::handle k_cache, nb::handle v_cache, nb::handle k_new,
             nb::handle v_new, nb::handle rotary_cos, nb::handle rotary_sin,
             nb::handle cache_seqlens, nb::handle cache_batch_idx, nb::handle block_table,
             nb::handle alibi_slopes, nb::handle cu_seqlens_q, nb::handle cu_seqlens_k_new,
             nb::handle out, nb::handle lse, std::optional<float> scale, bool causal,
             std::int64_t window_left, std::int64_t window_right, float softcap,
             bool rotary_interleaved, int num_splits, std::int64_t max_seqlen_q, int backend,
             int threads, int cpu_isa, std::uintptr_t stream, nb::handle workspace,
             nb::handle cache_leftpad) {
  // The cache is written only when new keys are appended: a read-only cache serves a call
  // without k_new / v_new.
  const Access cache_access = k_new.is_none() && v_new.is_none() ? Access::read : Access::write;
  KvCacheArrays v;
  v.q = view_of(q, "q");
  v.k_cache = view_of(k_cache, "k_cache", cache_access);
  v.v_cache = view_of(v_cache, "v_cache", cache_access);
  v.k_new = optional_view_of(k_new, "k_new");
  v.v_new = optional_view_of(v_new, "v_new");
  v.rotary_cos = optional_view_of(rotary_cos, "rotary_cos");
  v.rotary_sin = optional_view_of(rotary_sin, "rotary_sin");
  // Required by the library, which names it when absent.
  v.cache_seqlens = optional_view_of(cache_seqlens, "cache_seqlens");
  v.cache_leftpad = optional_view_of(cache_leftpad, "cache_leftpad");
  v.cache_batch_idx = optional_view_of(cache_batch_idx, "cache_batch_idx");
  v.block_table = optional_view_of(block_table, "block_table");
  v.alibi_slopes = optional_view_of(alibi_slopes, "alibi_slopes");
  v.cu_seqlens_q = optional_view_of(cu_seqlens_q, "cu_seqlens_q");
  v.cu_seqlens_k_new = optional_view_of(cu_seqlens_k_new, "cu_seqlens_k_new");
  v.out = view_of(out, "out", Access::write);
  v.lse = optional_view_of(lse, "lse", Access::write);

  KvCacheArgs a;
  a.q = v.q.tensor;
  a.k_cache = v.k_cache.tensor;
  a.v_cache = v.v_cache.tensor;
  a.k_new = v.k_new.tensor;
  a.v_new = v.v_new.tensor;
  a.rotary_cos = v.rotary_cos.tensor;
  a.rotary_sin = v.rotary_sin.tensor;
  a.rotary_interleaved = rotary_interleaved;
  a.cache_seqlens = v.cache_seqlens.tensor;
  a.cache_leftpad = v.cache_leftpad.tensor;
  a.cache_batch_idx = v.cache_batch_idx.tensor;
  a.block_table = v.block_table.tensor;
  a.alibi_slopes = v.alibi_slopes.tensor;
  a.cu_seqlens_q = v.cu_seqlens_q.tensor;
  a.max_seqlen_q = max_seqlen_q;
  a.cu_seqlens_k_new = v.cu_seqlens_k_new.tensor;
  a.out = v.out.tensor;
  a.lse = v.lse.tensor;
  a.scale = scale;
  a.causal = causal;
  a.window_left = window_left;
  a.window_right = window_right;
  a.softcap = softcap;
  a.num_splits = num_splits;
  Context ctx = context_of(backend, threads, cpu_isa, stream);
  const CallerWorkspace given = take_workspace(workspace,
                                               workspace.is_none() || a.q.device != Device::cuda
                                                   ? 0
                                                   : attention_with_kvcache_workspace_bytes(a, ctx),
                                               a.q, ctx);
  nb::gil_scoped_release release;
  attention_with_kvcache(a, ctx);
}

void rotary(nb::handle x, nb::handle cos, nb::handle sin, nb::handle out, nb::handle seqlen_offsets,
            nb::handle cu_seqlens, bool interleaved, int backend, int threads,
            std::uintptr_t stream) {
  // out may be x itself (rotated in place): the same array imported twice, once writable.
  const ArrayView vx = view_of(x, "x"), vcos = view_of(cos, "cos"), vsin = view_of(sin, "sin");
  const ArrayView vout = view_of(out, "out", Access::write);
  const ArrayView voffsets = optional_view_of(seqlen_offsets, "seqlen_offsets");
  const ArrayView vcu = optional_view_of(cu_seqlens, "cu_seqlens");
  RotaryArgs a;
  a.x = vx.tensor;
  a.out = vout.tensor;
  a.cos = vcos.tensor;
  a.sin = vsin.tensor;
  a.interleaved = interleaved;
  a.seqlen_offsets = voffsets.tensor;
  a.cu_seqlens = vcu.tensor;
  const Context ctx = context_of(backend, threads, /*cpu_isa=*/255, stream);
  nb::gil_scoped_release release;
  apply_rotary(a, ctx);
}

}  // namespace

void register_kvcache_calls(nb::module_& m) {
  m.def("kvcache", &kvcache, "q"_a, "k_cache"_a, "v_cache"_a, "k_new"_a.none(), "v_new"_a.none(),
        "rotary_cos"_a.none(), "rotary_sin"_a.none(), "cache_seqlens"_a.none(),
        "cache_batch_idx"_a.none(), "block_table"_a.none(), "alibi_slopes"_a.none(),
        "cu_seqlens_q"_a.none(), "cu_seqlens_k_new"_a.none(), "out"_a, "lse"_a.none(),
        "scale"_a.none(), "causal"_a, "window_left"_a, "window_right"_a, "softcap"_a,
        "rotary_interleaved"_a, "num_splits"_a, "max_seqlen_q"_a, "backend"_a, "threads"_a,
        "cpu_isa"_a, "stream"_a, "workspace"_a.none() = nb::none(),
        "cache_leftpad"_a.none() = nb::none(),
        "tileattn::attention_with_kvcache on caller-allocated arrays (see "
        "tileattn.attention_with_kvcache); k_cache and v_cache are written when k_new and v_new "
        "are given. workspace: None, or a callable taking a byte count and returning a "
        "contiguous 1-D device array at least that large (the CUDA workspace).");
  m.def("rotary", &rotary, "x"_a, "cos"_a, "sin"_a, "out"_a, "seqlen_offsets"_a.none(),
        "cu_seqlens"_a.none(), "interleaved"_a, "backend"_a, "threads"_a, "stream"_a,
        "tileattn::apply_rotary on caller-allocated arrays (see tileattn.apply_rotary); out may "
        "be x (rotated in place).");
}

}  // namespace tileattn::python
