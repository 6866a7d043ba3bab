#include "api/validate_options.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tileattn::detail {

void check_cu_seqlens(const char* name, const Tensor& cu, const Tensor& q, std::int64_t batch,
                      std::int64_t total, const char* total_name, std::int64_t max_seqlen,
                      const char* max_name) {
  if (!cu.present()) fail(name, "is required for a varlen batch (give cu_seqlens_q and _k)");
  require_rank(name, cu, 1, "[B + 1]");
  if (cu.dtype != DType::i32) fail(name, "dtype must be i32, got ", to_string(cu.dtype));
  require_device(name, cu, q);
  if (cu.shape[0] < 2) fail(name, "needs at least 2 entries ([B + 1], B >= 1), got ", cu.shape[0]);
  if (cu.shape[0] != batch + 1)
    fail(name, "has ", cu.shape[0], " entries, cu_seqlens_q has ", batch + 1,
         " (both are [B + 1])");
  if (cu.stride[0] != 1) fail(name, "must be contiguous");
  checked_span(name, cu);
  if (cu.device != Device::cpu) return;
  const auto* offsets = static_cast<const std::int32_t*>(cu.data);
  if (offsets[0] != 0) fail(name, "must start at 0, got ", offsets[0]);
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t len = std::int64_t{offsets[b + 1]} - offsets[b];
    if (len < 0)
      fail(name, "must be non-decreasing: entry ", b + 1, " (", offsets[b + 1], ") is below entry ",
           b, " (", offsets[b], ")");
    if (len > max_seqlen)
      fail(max_name, "is ", max_seqlen, " but sequence ", b, " has ", len, " rows (", name, ")");
  }
  if (offsets[batch] != total)
    fail(name, "ends at ", offsets[batch], " but ", total_name, " is ", total);
}

void set_scale_and_softcap(AttnParams& p, std::optional<float> scale, float softcap) {
  if (scale.has_value() && !std::isfinite(*scale)) fail("scale", "must be finite, got ", *scale);
  p.scale = scale.has_value() ? *scale : 1.0f / std::sqrt(static_cast<float>(p.dim));
  if (!std::isfinite(softcap) || softcap < 0.0f)
    fail("softcap", "must be finite and >= 0 (0 disables), got ", softcap);
  // A subnormal cap has no finite f32 reciprocal, which the kernels' tanh(s / c) needs.
  if (softcap > 0.0f && softcap < std::numeric_limits<float>::min())
    fail("softcap", "must be 0 (off) or at least ", std::numeric_limits<float>::min(),
         " (the smallest normal f32), got ", softcap);
  p.softcap = softcap;
}

void set_window(AttnParams& p, std::int64_t window_left, std::int64_t window_right, bool causal,
                Alignment alignment) {
  if (window_left < -1) fail("window_left", "must be >= 0, or -1 for unbounded, got ", window_left);
  if (window_right < -1)
    fail("window_right", "must be >= 0, or -1 for unbounded, got ", window_right);
  if (alignment != Alignment::bottom_right && alignment != Alignment::top_left)
    fail("alignment", "value ", static_cast<unsigned>(alignment),
         " is not a tileattn::Alignment (bottom_right or top_left)");
  p.alignment = alignment;
  // A window wider than Lq + Lk is unbounded in effect; clamping keeps index arithmetic in range.
  const auto clamp_window = [&](std::int64_t w) {
    return w == kUnbounded ? w : std::min(w, p.len_q + p.len_k);
  };
  p.window_left = clamp_window(window_left);
  p.window_right = clamp_window(window_right);
  if (causal)
    p.window_right = p.window_right == kUnbounded ? 0 : std::min<std::int64_t>(p.window_right, 0);
}

Span set_lse(AttnParams& p, const Tensor& lse_arg, const Tensor& q, bool varlen,
             std::initializer_list<Span> inputs, const char* inputs_names) {
  Span lse_span;  // empty when there is no lse: overlaps nothing
  if (lse_arg.present()) {
    const Tensor& lse = lse_arg;
    const int off = varlen ? 1 : 0;  // varlen: [Hq, total_q]
    require_rank("lse", lse, 3 - off, varlen ? "[Hq, total_q]" : "[B, Hq, Lq]");
    if (lse.dtype != DType::f32) fail("lse", "dtype must be f32, got ", to_string(lse.dtype));
    require_device("lse", lse, q);
    if (!varlen) require_dim("lse", lse, 0, p.batch, "batch");
    require_dim("lse", lse, 1 - off, p.heads_q, "query heads");
    require_dim("lse", lse, 2 - off, varlen ? p.total_q : p.len_q, "query length");
    lse_span = checked_span("lse", lse);
    require_no_internal_overlap("lse", lse);
    for (const Span& in : inputs)
      if (lse_span.overlaps(in)) fail("lse", "overlaps ", inputs_names);
    p.lse = static_cast<float*>(lse.data);
    p.lse_stride_b = varlen ? 0 : lse.stride[0];
    p.lse_stride_h = lse.stride[1 - off], p.lse_stride_l = lse.stride[2 - off];
  }
  return lse_span;
}

void set_alibi(AttnParams& p, const Tensor& slopes, const Tensor& q,
               std::initializer_list<Span> outputs) {
  if (slopes.present()) {
    const Tensor& s = slopes;
    if (s.rank != 1 && s.rank != 2)
      fail("alibi_slopes", "expected rank 1 [Hq] or 2 [B, Hq], got rank ", s.rank);
    if (s.dtype != DType::f32) fail("alibi_slopes", "dtype must be f32, got ", to_string(s.dtype));
    require_device("alibi_slopes", s, q);
    if (s.rank == 1) {
      require_dim("alibi_slopes", s, 0, p.heads_q, "query heads");
      p.alibi_stride_h = s.stride[0];
    } else {
      require_dim("alibi_slopes", s, 0, p.batch, "batch");
      require_dim("alibi_slopes", s, 1, p.heads_q, "query heads");
      p.alibi_stride_b = s.stride[0];
      p.alibi_stride_h = s.stride[1];
    }
    const Span slopes_span = checked_span("alibi_slopes", s);
    for (const Span& out : outputs)
      if (slopes_span.overlaps(out)) fail("alibi_slopes", "overlaps out or lse");
    p.alibi_slopes = static_cast<const float*>(s.data);
  }
}

}  // namespace tileattn::detail
