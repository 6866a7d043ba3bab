#include "attention_calls.hpp"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dlpack_tensor.hpp"
#include "tileattn/tileattn.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace tileattn::python {
namespace {

// The options of AttentionArgs (every field but the tensors) and of Context, as the Python layer
// passes them: enums as their integer values (the Python layer maps the names).
struct Options {
  bool causal = false;
  int alignment = 0;
  std::int64_t window_left = -1, window_right = -1;
  std::optional<float> scale;
  float softcap = 0.0f;
  float dropout_p = 0.0f;
  std::uint64_t seed = 0, offset = 0;
  bool bhsd = false;  // q, k, v, out (and dout, dq, dk, dv) are [B, H, L, D] arrays
  std::int64_t max_seqlen_q = 0, max_seqlen_k = 0;  // varlen bounds (with cu_seqlens)
  int backend = 0, threads = 0, cpu_isa = 255;
  std::uintptr_t stream = 0;
};

void apply(const Options& o, AttentionArgs& a) {
  a.causal = o.causal;
  a.alignment = static_cast<Alignment>(o.alignment);
  a.window_left = o.window_left;
  a.window_right = o.window_right;
  a.scale = o.scale;
  a.softcap = o.softcap;
  a.dropout_p = o.dropout_p;
  a.dropout_seed = o.seed;
  a.dropout_offset = o.offset;
  a.max_seqlen_q = o.max_seqlen_q;
  a.max_seqlen_k = o.max_seqlen_k;
}

Context context_of(const Options& o) {
  Context ctx;
  ctx.backend = static_cast<Backend>(o.backend);
  ctx.threads = o.threads;
  ctx.cpu_isa = static_cast<CpuIsa>(o.cpu_isa);
  ctx.cuda_stream = reinterpret_cast<void*>(o.stream);
  return ctx;
}

// A [B, H, L, D] array seen as the [B, L, H, D] tensor AttentionArgs takes (no copy).
Tensor in_layout(const ArrayView& view, const char* name, bool bhsd) {
  if (!bhsd) return view.tensor;
  if (view.tensor.rank != 4)
    throw Error(std::string("tileattn: argument '") + name +
                "': layout 'bhsd' expects a rank-4 [B, H, L, D] array, got rank " +
                std::to_string(view.tensor.rank));
  return bhsd_as_bshd(view.tensor);
}

// The varlen offsets (cu_seqlens_q and _k, or None for a padded batch), for both directions.
struct Offsets {
  ArrayView q, k;
  Offsets(nb::handle cu_q, nb::handle cu_k)
      : q(optional_view_of(cu_q, "cu_seqlens_q")), k(optional_view_of(cu_k, "cu_seqlens_k")) {}
  void apply(AttentionArgs& a) const {
    a.cu_seqlens_q = q.tensor;
    a.cu_seqlens_k = k.tensor;
  }
};

void forward(nb::handle q, nb::handle k, nb::handle v, nb::handle out, nb::handle lse,
             nb::handle mask, nb::handle key_lengths, nb::handle alibi_slopes,
             const Offsets& offsets, const Options& o) {
  const ArrayView vq = view_of(q, "q"), vk = view_of(k, "k"), vv = view_of(v, "v");
  const ArrayView vout = view_of(out, "out", Access::write);
  const ArrayView vlse = optional_view_of(lse, "lse", Access::write);
  const ArrayView vmask = optional_view_of(mask, "mask");
  const ArrayView vlen = optional_view_of(key_lengths, "key_lengths");
  const ArrayView vslopes = optional_view_of(alibi_slopes, "alibi_slopes");
  AttentionArgs a;
  a.q = in_layout(vq, "q", o.bhsd);
  a.k = in_layout(vk, "k", o.bhsd);
  a.v = in_layout(vv, "v", o.bhsd);
  a.out = in_layout(vout, "out", o.bhsd);
  a.lse = vlse.tensor;
  a.mask = vmask.tensor;
  a.key_lengths = vlen.tensor;
  a.alibi_slopes = vslopes.tensor;
  offsets.apply(a);
  apply(o, a);
  const Context ctx = context_of(o);
  nb::gil_scoped_release release;
  attention_forward(a, ctx);
}

void backward(nb::handle dout, nb::handle q, nb::handle k, nb::handle v, nb::handle out,
              nb::handle lse, nb::handle dq, nb::handle dk, nb::handle dv, nb::handle mask,
              nb::handle key_lengths, nb::handle alibi_slopes, bool deterministic,
              nb::handle workspace, const Offsets& offsets, const Options& o) {
  const ArrayView vdout = view_of(dout, "dout");
  const ArrayView vq = view_of(q, "q"), vk = view_of(k, "k"), vv = view_of(v, "v");
  // lse is required: left out, the library names it ("is required by attention_backward").
  const ArrayView vout = view_of(out, "out"), vlse = optional_view_of(lse, "lse");
  const ArrayView vdq = view_of(dq, "dq", Access::write);
  const ArrayView vdk = view_of(dk, "dk", Access::write);
  const ArrayView vdv = view_of(dv, "dv", Access::write);
  const ArrayView vmask = optional_view_of(mask, "mask");
  const ArrayView vlen = optional_view_of(key_lengths, "key_lengths");
  const ArrayView vslopes = optional_view_of(alibi_slopes, "alibi_slopes");
  AttentionBackwardArgs a;
  a.q = in_layout(vq, "q", o.bhsd);
  a.k = in_layout(vk, "k", o.bhsd);
  a.v = in_layout(vv, "v", o.bhsd);
  a.out = in_layout(vout, "out", o.bhsd);
  a.dout = in_layout(vdout, "dout", o.bhsd);
  a.dq = in_layout(vdq, "dq", o.bhsd);
  a.dk = in_layout(vdk, "dk", o.bhsd);
  a.dv = in_layout(vdv, "dv", o.bhsd);
  a.lse = vlse.tensor;
  a.mask = vmask.tensor;
  a.key_lengths = vlen.tensor;
  a.alibi_slopes = vslopes.tensor;
  a.deterministic = deterministic;
  offsets.apply(a);
  apply(o, a);
  Context ctx = context_of(o);
  const CallerWorkspace given = take_workspace(workspace,
                                               workspace.is_none() || a.q.device != Device::cuda
                                                   ? 0
                                                   : attention_backward_workspace_bytes(a, ctx),
                                               a.q, ctx);
  nb::gil_scoped_release release;
  attention_backward(a, ctx);
}

Options make_options(bool causal, int alignment, std::int64_t window_left,
                     std::int64_t window_right, std::optional<float> scale, float softcap,
                     float dropout_p, std::uint64_t seed, std::uint64_t offset, bool bhsd,
                     int backend, int threads, int cpu_isa, std::uintptr_t stream,
                     std::int64_t max_seqlen_q, std::int64_t max_seqlen_k) {
  Options o;
  o.causal = causal, o.alignment = alignment;
  o.window_left = window_left, o.window_right = window_right;
  o.scale = scale, o.softcap = softcap, o.dropout_p = dropout_p;
  o.seed = seed, o.offset = offset, o.bhsd = bhsd;
  o.max_seqlen_q = max_seqlen_q, o.max_seqlen_k = max_seqlen_k;
  o.backend = backend, o.threads = threads, o.cpu_isa = cpu_isa, o.stream = stream;
  return o;
}

void merge(const std::vector<nb::handle>& outs, const std::vector<nb::handle>& lses, nb::handle out,
           nb::handle lse, int backend, int threads, std::uintptr_t stream) {
  std::vector<ArrayView> views;
  std::vector<Tensor> out_parts, lse_parts;
  views.reserve(outs.size() + lses.size());
  for (std::size_t i = 0; i < outs.size(); ++i) {
    views.push_back(view_of(outs[i], ("outs[" + std::to_string(i) + "]").c_str()));
    out_parts.push_back(views.back().tensor);
  }
  for (std::size_t i = 0; i < lses.size(); ++i) {
    views.push_back(view_of(lses[i], ("lses[" + std::to_string(i) + "]").c_str()));
    lse_parts.push_back(views.back().tensor);
  }
  const ArrayView vout = view_of(out, "out", Access::write);
  const ArrayView vlse = optional_view_of(lse, "lse", Access::write);
  Context ctx;
  ctx.backend = static_cast<Backend>(backend);
  ctx.threads = threads;
  ctx.cuda_stream = reinterpret_cast<void*>(stream);
  nb::gil_scoped_release release;
  merge_attention_states(out_parts, lse_parts, vout.tensor, vlse.tensor, ctx);
}

}  // namespace

void register_attention_calls(nb::module_& m) {
  m.def(
      "forward",
      [](nb::handle q, nb::handle k, nb::handle v, nb::handle out, nb::handle lse, nb::handle mask,
         nb::handle key_lengths, nb::handle alibi_slopes, bool causal, int alignment,
         std::int64_t window_left, std::int64_t window_right, std::optional<float> scale,
         float softcap, float dropout_p, std::uint64_t seed, std::uint64_t offset, bool bhsd,
         int backend, int threads, int cpu_isa, std::uintptr_t stream, nb::handle cu_seqlens_q,
         nb::handle cu_seqlens_k, std::int64_t max_seqlen_q, std::int64_t max_seqlen_k) {
        forward(q, k, v, out, lse, mask, key_lengths, alibi_slopes,
                Offsets(cu_seqlens_q, cu_seqlens_k),
                make_options(causal, alignment, window_left, window_right, scale, softcap,
                             dropout_p, seed, offset, bhsd, backend, threads, cpu_isa, stream,
                             max_seqlen_q, max_seqlen_k));
      },
      "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a.none(), "mask"_a.none(), "key_lengths"_a.none(),
      "alibi_slopes"_a.none(), "causal"_a, "alignment"_a, "window_left"_a, "window_right"_a,
      "scale"_a.none(), "softcap"_a, "dropout_p"_a, "seed"_a, "offset"_a, "bhsd"_a, "backend"_a,
      "threads"_a, "cpu_isa"_a, "stream"_a, "cu_seqlens_q"_a.none() = nb::none(),
      "cu_seqlens_k"_a.none() = nb::none(), "max_seqlen_q"_a = 0, "max_seqlen_k"_a = 0,
      "tileattn::attention_forward on caller-allocated arrays (see tileattn.attention).");
  m.def(
      "backward",
      [](nb::handle dout, nb::handle q, nb::handle k, nb::handle v, nb::handle out, nb::handle lse,
         nb::handle dq, nb::handle dk, nb::handle dv, nb::handle mask, nb::handle key_lengths,
         nb::handle alibi_slopes, bool causal, int alignment, std::int64_t window_left,
         std::int64_t window_right, std::optional<float> scale, float softcap, float dropout_p,
         std::uint64_t seed, std::uint64_t offset, bool bhsd, bool deterministic, int backend,
         int threads, int cpu_isa, std::uintptr_t stream, nb::handle workspace,
         nb::handle cu_seqlens_q, nb::handle cu_seqlens_k, std::int64_t max_seqlen_q,
         std::int64_t max_seqlen_k) {
        backward(dout, q, k, v, out, lse, dq, dk, dv, mask, key_lengths, alibi_slopes,
                 deterministic, workspace, Offsets(cu_seqlens_q, cu_seqlens_k),
                 make_options(causal, alignment, window_left, window_right, scale, softcap,
                              dropout_p, seed, offset, bhsd, backend, threads, cpu_isa, stream,
                              max_seqlen_q, max_seqlen_k));
      },
      "dout"_a, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a.none(), "dq"_a, "dk"_a, "dv"_a,
      "mask"_a.none(), "key_lengths"_a.none(), "alibi_slopes"_a.none(), "causal"_a, "alignment"_a,
      "window_left"_a, "window_right"_a, "scale"_a.none(), "softcap"_a, "dropout_p"_a, "seed"_a,
      "offset"_a, "bhsd"_a, "deterministic"_a, "backend"_a, "threads"_a, "cpu_isa"_a, "stream"_a,
      "workspace"_a.none() = nb::none(), "cu_seqlens_q"_a.none() = nb::none(),
      "cu_seqlens_k"_a.none() = nb::none(), "max_seqlen_q"_a = 0, "max_seqlen_k"_a = 0,
      "tileattn::attention_backward on caller-allocated arrays (see "
      "tileattn.attention_backward). workspace: None, or a callable taking a byte count and "
      "returning a contiguous 1-D device array at least that large (the CUDA workspace).");
  m.def("merge", &merge, "outs"_a, "lses"_a, "out"_a, "lse"_a.none(), "backend"_a, "threads"_a,
        "stream"_a, "tileattn::merge_attention_states on caller-allocated arrays.");
}

}  // namespace tileattn::python
