#include "api/validate_merge.hpp"

#include <string>
#include <vector>

#include "api/tensor_checks.hpp"

namespace tileattn::detail {
namespace {

// The operand's (b, l, h) strides: [B, L, H, Dv] / [B, H, L], or [total, H, Dv] / [H, total]
// as a batch of one.
MergeOperand operand(const Tensor& out, const Tensor* lse) {
  MergeOperand m;
  m.out = out.data;
  m.dtype = out.dtype;
  const int o = out.rank == 4 ? 1 : 0;
  m.o_stride_b = o ? out.stride[0] : 0;
  m.o_stride_l = out.stride[o];
  m.o_stride_h = out.stride[o + 1];
  if (lse != nullptr && lse->present()) {
    m.lse = static_cast<float*>(lse->data);
    m.lse_stride_b = o ? lse->stride[0] : 0;
    m.lse_stride_h = lse->stride[o];
    m.lse_stride_l = lse->stride[o + 1];
  }
  return m;
}

bool same_view(const Tensor& a, const Tensor& b) {
  if (a.data != b.data || a.dtype != b.dtype || a.rank != b.rank) return false;
  for (int d = 0; d < a.rank; ++d)
    if (a.shape[d] != b.shape[d] || (a.shape[d] > 1 && a.stride[d] != b.stride[d])) return false;
  return true;
}

}  // namespace

MergeParams validate_merge(std::span<const Tensor> outs, std::span<const Tensor> lses,
                           const Tensor& out, const Tensor& lse) {
  if (outs.empty() || outs.size() > static_cast<std::size_t>(kMaxMergeParts))
    fail("outs", "must hold 1..", kMaxMergeParts, " parts, got ", outs.size());
  if (lses.size() != outs.size())
    fail("lses", "must hold one lse per part: ", outs.size(), " parts, ", lses.size(), " lse");
  check_tensor_header("out", out, Presence::required);
  check_tensor_header("lse", lse, Presence::optional);
  if (out.rank != 4 && out.rank != 3)
    fail("out", "expected rank 4 [B, L, H, Dv] or 3 [total, H, Dv], got rank ", out.rank);
  const bool packed = out.rank == 3;
  const char* out_layout = packed ? "[total, H, Dv]" : "[B, L, H, Dv]";
  const char* lse_layout = packed ? "[H, total]" : "[B, H, L]";
  const int o = packed ? 0 : 1;
  const std::int64_t B = packed ? 1 : out.shape[0], L = out.shape[o], H = out.shape[o + 1],
                     Dv = out.shape[o + 2];
  if (!is_float_storage(out.dtype))
    fail("out", "dtype must be f32, f16 or bf16, got ", to_string(out.dtype));
  require_unit_inner_stride("out", out);
  const Span out_span = checked_span("out", out);
  require_no_internal_overlap("out", out);

  // The lse shape [B, H, L] (or [H, L]) of a result shaped like out.
  const auto require_lse = [&](const char* name, const Tensor& t) {
    require_rank(name, t, out.rank - 1, lse_layout);
    if (t.dtype != DType::f32) fail(name, "dtype must be f32, got ", to_string(t.dtype));
    require_device(name, t, out);
    if (!packed) require_dim(name, t, 0, B, "batch");
    require_dim(name, t, o, H, "heads");
    require_dim(name, t, o + 1, L, "length");
  };
  Span lse_span;
  if (lse.present()) {
    require_lse("lse", lse);
    lse_span = checked_span("lse", lse);
    require_no_internal_overlap("lse", lse);
    if (lse_span.overlaps(out_span)) fail("lse", "overlaps out");
  }

  MergeParams p;
  p.num_parts = static_cast<int>(outs.size());
  p.batch = B, p.len = L, p.heads = H, p.dim = Dv;
  p.device = out.device;
  p.device_index = out.device_index;
  p.result = operand(out, &lse);
  bool out_in_place = false, lse_in_place = false;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    const std::string out_name = "outs[" + std::to_string(i) + "]";
    const std::string lse_name = "lses[" + std::to_string(i) + "]";
    const Tensor &oi = outs[i], &li = lses[i];
    check_tensor_header(out_name.c_str(), oi, Presence::required);
    check_tensor_header(lse_name.c_str(), li, Presence::required);
    require_rank(out_name.c_str(), oi, out.rank, out_layout);
    if (!is_float_storage(oi.dtype))
      fail(out_name.c_str(), "dtype must be f32, f16 or bf16, got ", to_string(oi.dtype));
    require_device(out_name.c_str(), oi, out);
    for (int d = 0; d < out.rank; ++d)
      if (oi.shape[d] != out.shape[d])
        fail(out_name.c_str(), "shape ", shape_string(oi), " must equal out's ", shape_string(out));
    require_unit_inner_stride(out_name.c_str(), oi);
    require_lse(lse_name.c_str(), li);
    const Span oi_span = checked_span(out_name.c_str(), oi);
    const Span li_span = checked_span(lse_name.c_str(), li);
    // In place: the result may be exactly one part's view (each row is read before it is
    // written); any other overlap would read half-merged values.
    if (same_view(oi, out)) {
      if (out_in_place) fail("out", "is the same view as two parts' out");
      out_in_place = true;
    } else if (oi_span.overlaps(out_span) || li_span.overlaps(out_span)) {
      fail("out", "overlaps ", out_name, " or ", lse_name, " (only the same view is allowed)");
    }
    if (lse.present()) {
      if (same_view(li, lse)) {
        if (lse_in_place) fail("lse", "is the same view as two parts' lse");
        lse_in_place = true;
      } else if (li_span.overlaps(lse_span) || oi_span.overlaps(lse_span)) {
        fail("lse", "overlaps ", out_name, " or ", lse_name, " (only the same view is allowed)");
      }
    }
    p.parts[i] = operand(oi, &li);
  }
  return p;
}

}  // namespace tileattn::detail
