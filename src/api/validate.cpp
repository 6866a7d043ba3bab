#include "api/validate.hpp"

#include <cmath>
#include <utility>
#include <vector>

#include "api/tensor_checks.hpp"
#include "api/validate_options.hpp"

namespace tileattn::detail {
namespace {

// Where q, k, v, out (and dout, dq, dk, dv) keep each logical dimension: [B, L, H, D] for a
// padded batch, [total, H, D] (no batch dimension) for a packed varlen batch.
struct RowLayout {
  bool varlen = false;
  int rank() const { return varlen ? 3 : 4; }
  int len() const { return varlen ? 0 : 1; }
  int heads() const { return varlen ? 1 : 2; }
  int dim() const { return varlen ? 2 : 3; }
  std::int64_t stride_b(const Tensor& t) const { return varlen ? 0 : t.stride[0]; }
  const char* q() const { return varlen ? "[total_q, Hq, D]" : "[B, Lq, Hq, D]"; }
  const char* k() const { return varlen ? "[total_k, Hkv, D]" : "[B, Lk, Hkv, D]"; }
  const char* v() const { return varlen ? "[total_k, Hkv, Dv]" : "[B, Lk, Hkv, Dv]"; }
  const char* out() const { return varlen ? "[total_q, Hq, Dv]" : "[B, Lq, Hq, Dv]"; }
};

RowLayout row_layout(const AttentionArgs& a) {
  return RowLayout{a.cu_seqlens_q.present() || a.cu_seqlens_k.present() ||
                   a.cu_seqlens_q.rank != 0 || a.cu_seqlens_k.rank != 0};
}

}  // namespace

AttnParams validate_forward(const AttentionArgs& a) {
  AttnParams p;
  const Tensor* required[] = {&a.q, &a.k, &a.v, &a.out};
  const char* required_names[] = {"q", "k", "v", "out"};
  for (int i = 0; i < 4; ++i)
    check_tensor_header(required_names[i], *required[i], Presence::required);
  const std::pair<const char*, const Tensor*> optional[] = {{"lse", &a.lse},
                                                            {"mask", &a.mask},
                                                            {"key_lengths", &a.key_lengths},
                                                            {"alibi_slopes", &a.alibi_slopes},
                                                            {"cu_seqlens_q", &a.cu_seqlens_q},
                                                            {"cu_seqlens_k", &a.cu_seqlens_k}};
  for (const auto& [name, t] : optional) check_tensor_header(name, *t, Presence::optional);
  const RowLayout rows = row_layout(a);
  const char* layouts[] = {rows.q(), rows.k(), rows.v(), rows.out()};
  for (int i = 0; i < 4; ++i)
    require_rank(required_names[i], *required[i], rows.rank(), layouts[i]);
  const Tensor &q = a.q, &k = a.k, &v = a.v, &out = a.out;

  if (!is_float_storage(q.dtype))
    fail("q", "dtype must be f32, f16 or bf16, got ", to_string(q.dtype));
  if (k.dtype != q.dtype)
    fail("k", "dtype ", to_string(k.dtype), " differs from q's ", to_string(q.dtype));
  if (v.dtype != q.dtype)
    fail("v", "dtype ", to_string(v.dtype), " differs from q's ", to_string(q.dtype));
  if (!is_float_storage(out.dtype))
    fail("out", "dtype must be f32, f16 or bf16, got ", to_string(out.dtype));
  for (int i = 1; i < 4; ++i) require_device(required_names[i], *required[i], q);
  if (q.device == Device::cuda && q.device_index < 0) fail("q", "CUDA device index is negative");

  // Varlen: B sequences; Lq and Lk are the tensors' row counts (total_q, total_k) until the
  // per-sequence maxima replace them below.
  const std::int64_t B = rows.varlen ? a.cu_seqlens_q.shape[0] - 1 : q.shape[0];
  const std::int64_t Lq = q.shape[rows.len()], Hq = q.shape[rows.heads()], D = q.shape[rows.dim()];
  const std::int64_t Lk = k.shape[rows.len()], Hkv = k.shape[rows.heads()];
  const std::int64_t Dv = v.shape[rows.dim()];
  if (!rows.varlen && B < 1) fail("q", "batch size must be at least 1, got ", B);
  if (Lq < 0 || Lq > kMaxLength) fail("q", "query length must be in [0, 2^31 - 1], got ", Lq);
  if (Hq < 1) fail("q", "number of query heads must be at least 1, got ", Hq);
  if (D < 1 || D > 256) fail("q", "head dim D must be in 1..256, got ", D);
  if (!rows.varlen) require_dim("k", k, 0, B, "batch");
  require_dim("k", k, rows.dim(), D, "head dim, must equal q's");
  if (Hkv < 1) fail("k", "number of kv heads must be at least 1, got ", Hkv);
  if (Hq % Hkv != 0) fail("k", "query heads (", Hq, ") must be a multiple of kv heads (", Hkv, ")");
  if (Lk < 0 || Lk > kMaxLength) fail("k", "key length must be in [0, 2^31 - 1], got ", Lk);
  if (!rows.varlen) require_dim("v", v, 0, B, "batch");
  require_dim("v", v, rows.len(), Lk, "key length, must equal k's");
  require_dim("v", v, rows.heads(), Hkv, "kv heads, must equal k's");
  if (Dv < 1 || Dv > 256) fail("v", "head dim Dv must be in 1..256, got ", Dv);
  if (!rows.varlen) require_dim("out", out, 0, B, "batch");
  require_dim("out", out, rows.len(), Lq, "query length");
  require_dim("out", out, rows.heads(), Hq, "query heads");
  require_dim("out", out, rows.dim(), Dv, "head dim Dv of v");
  for (int i = 0; i < 4; ++i) require_unit_inner_stride(required_names[i], *required[i]);

  const Span q_span = checked_span("q", q), k_span = checked_span("k", k),
             v_span = checked_span("v", v), out_span = checked_span("out", out);
  require_no_internal_overlap("out", out);
  if (out_span.overlaps(q_span) || out_span.overlaps(k_span) || out_span.overlaps(v_span))
    fail("out", "overlaps an input (q, k or v); the output must be a separate buffer");

  p.q = q.data;
  p.k = k.data;
  p.v = v.data;
  p.out = out.data;
  p.dtype = q.dtype;
  p.out_dtype = out.dtype;
  p.device = q.device;
  p.device_index = q.device_index;
  p.batch = B;
  p.len_q = Lq;
  p.len_k = Lk;
  if (rows.varlen) {
    if (a.mask.present())
      fail("mask", "is not supported with a varlen batch (use causal, window or key_lengths)");
    if (a.max_seqlen_q < 0 || a.max_seqlen_q > kMaxLength)
      fail("max_seqlen_q", "must be in [0, 2^31 - 1], got ", a.max_seqlen_q);
    if (a.max_seqlen_k < 0 || a.max_seqlen_k > kMaxLength)
      fail("max_seqlen_k", "must be in [0, 2^31 - 1], got ", a.max_seqlen_k);
    check_cu_seqlens("cu_seqlens_q", a.cu_seqlens_q, q, B, Lq, "total_q (q's rows)", a.max_seqlen_q,
                     "max_seqlen_q");
    check_cu_seqlens("cu_seqlens_k", a.cu_seqlens_k, q, B, Lk, "total_k (k's rows)", a.max_seqlen_k,
                     "max_seqlen_k");
    p.cu_seqlens_q = static_cast<const std::int32_t*>(a.cu_seqlens_q.data);
    p.cu_seqlens_k = static_cast<const std::int32_t*>(a.cu_seqlens_k.data);
    p.total_q = Lq;
    p.total_k = Lk;
    p.len_q = a.max_seqlen_q;
    p.len_k = a.max_seqlen_k;
  }
  p.heads_q = Hq;
  p.heads_kv = Hkv;
  p.dim = D;
  p.dim_v = Dv;
  p.heads_per_kv = Hq / Hkv;
  const int l = rows.len(), h = rows.heads();
  p.q_stride_b = rows.stride_b(q), p.q_stride_l = q.stride[l], p.q_stride_h = q.stride[h];
  p.k_stride_b = rows.stride_b(k), p.k_stride_l = k.stride[l], p.k_stride_h = k.stride[h];
  p.v_stride_b = rows.stride_b(v), p.v_stride_l = v.stride[l], p.v_stride_h = v.stride[h];
  p.o_stride_b = rows.stride_b(out), p.o_stride_l = out.stride[l], p.o_stride_h = out.stride[h];

  const Span lse_span =
      set_lse(p, a.lse, q, rows.varlen, {q_span, k_span, v_span, out_span}, "q, k, v or out");
  if (rows.varlen) {
    for (const auto& [name, t] :
         {std::pair<const char*, const Tensor*>{"cu_seqlens_q", &a.cu_seqlens_q},
          {"cu_seqlens_k", &a.cu_seqlens_k}}) {
      const Span span = checked_span(name, *t);
      if (span.overlaps(out_span) || span.overlaps(lse_span)) fail(name, "overlaps out or lse");
    }
  }

  set_scale_and_softcap(p, a.scale, a.softcap);
  set_window(p, a.window_left, a.window_right, a.causal, a.alignment);

  if (a.mask.present()) {
    const Tensor& m = a.mask;
    if (m.rank < 2 || m.rank > 4)
      fail("mask", "expected rank 2..4 broadcastable to [B, Hq, Lq, Lk], got rank ", m.rank);
    if (m.dtype != DType::boolean && m.dtype != DType::f32)
      fail("mask", "dtype must be boolean (true = attend) or f32 (additive), got ",
           to_string(m.dtype));
    require_device("mask", m, q);
    const std::int64_t target[4] = {B, Hq, Lq, Lk};
    const char* dim_names[4] = {"B", "Hq", "Lq", "Lk"};
    std::int64_t strides[4] = {0, 0, 0, 0};
    for (int d = 0; d < m.rank; ++d) {
      const int t = 4 - m.rank + d;
      if (m.shape[d] != target[t] && m.shape[d] != 1)
        fail("mask", "shape ", shape_string(m), " does not broadcast to [B, Hq, Lq, Lk] = [", B,
             ", ", Hq, ", ", Lq, ", ", Lk, "]: dimension ", d, " must be ", target[t], " (",
             dim_names[t], ") or 1");
      strides[t] = m.shape[d] == 1 ? 0 : m.stride[d];
    }
    const Span mask_span = checked_span("mask", m);
    if (mask_span.overlaps(out_span) || mask_span.overlaps(lse_span))
      fail("mask", "overlaps out or lse");
    p.mask = m.data;
    p.mask_dtype = m.dtype;
    p.mask_stride_b = strides[0], p.mask_stride_h = strides[1];
    p.mask_stride_q = strides[2], p.mask_stride_k = strides[3];
  }

  if (a.key_lengths.present()) {
    const Tensor& kl = a.key_lengths;
    require_rank("key_lengths", kl, 1, "[B]");
    if (kl.dtype != DType::i32 && kl.dtype != DType::i64)
      fail("key_lengths", "dtype must be i32 or i64, got ", to_string(kl.dtype));
    require_device("key_lengths", kl, q);
    require_dim("key_lengths", kl, 0, B, "batch");
    if (kl.shape[0] > 1 && kl.stride[0] != 1) fail("key_lengths", "must be contiguous");
    const Span kl_span = checked_span("key_lengths", kl);
    if (kl_span.overlaps(out_span) || kl_span.overlaps(lse_span))
      fail("key_lengths", "overlaps out or lse");
    p.key_lengths = kl.data;
    p.key_lengths_dtype = kl.dtype;
    if (kl.device == Device::cpu) {  // device-resident lengths are clamped by the kernel instead
      for (std::int64_t b = 0; b < B; ++b) {
        const std::int64_t len = p.key_length(b);
        const std::int64_t keys =
            rows.varlen ? std::int64_t{p.cu_seqlens_k[b + 1]} - p.cu_seqlens_k[b] : Lk;
        if (len < 0 || len > keys)
          fail("key_lengths", "entry ", b, " is ", len, ", expected a value in [0, ", keys,
               rows.varlen ? "] (sequence b's key count)" : "]");
      }
    }
  }

  set_alibi(p, a.alibi_slopes, q, {out_span, lse_span});

  if (!(a.dropout_p >= 0.0f && a.dropout_p < 1.0f))
    fail("dropout_p", "must be in [0, 1) (0 disables), got ", a.dropout_p);
  if (a.dropout_p > 0.0f) {
    // Drop iff the element's 32-bit Philox word < floor(p * 2^32) (docs/semantics.md).
    p.dropout.threshold =
        static_cast<std::uint32_t>(std::floor(static_cast<double>(a.dropout_p) * 4294967296.0));
    p.dropout.keep_scale = 1.0f / (1.0f - a.dropout_p);
    p.dropout.seed = a.dropout_seed;
    p.dropout.offset = a.dropout_offset;
    p.dropout.heads_q = Hq;
  }
  return p;
}

namespace {

// dout, dq, dk, dv: a float tensor shaped like `model` (q, k, v or out) on q's device.
void require_like(const char* name, const Tensor& t, const Tensor& model, const char* model_name,
                  const char* layout, const Tensor& q) {
  require_rank(name, t, model.rank, layout);
  if (!is_float_storage(t.dtype))
    fail(name, "dtype must be f32, f16 or bf16, got ", to_string(t.dtype));
  require_device(name, t, q);
  for (int d = 0; d < model.rank; ++d)
    if (t.shape[d] != model.shape[d])
      fail(name, "shape ", shape_string(t), " must equal ", model_name, "'s ", shape_string(model),
           " ", layout);
  require_unit_inner_stride(name, t);
}

}  // namespace

AttnBackwardParams validate_backward(const AttentionBackwardArgs& a) {
  if (a.lse.rank == 0 && a.lse.data == nullptr)
    fail("lse", "is required by attention_backward: the forward's log-sum-exp, f32 [B, Hq, Lq]");
  AttnBackwardParams p;
  static_cast<AttnParams&>(p) = validate_forward(a);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"dout", &a.dout},
                                {"dq", &a.dq},
                                {"dk", &a.dk},
                                {"dv", &a.dv}})
    check_tensor_header(name, *t, Presence::required);
  const RowLayout rows = row_layout(a);
  require_like("dout", a.dout, a.out, "out", rows.out(), a.q);
  require_like("dq", a.dq, a.q, "q", rows.q(), a.q);
  require_like("dk", a.dk, a.k, "k", rows.k(), a.q);
  require_like("dv", a.dv, a.v, "v", rows.v(), a.q);

  // The gradients must not overlap any input or each other.
  std::vector<Span> inputs;
  const std::pair<const char*, const Tensor*> read[] = {{"q", &a.q},
                                                        {"k", &a.k},
                                                        {"v", &a.v},
                                                        {"out", &a.out},
                                                        {"lse", &a.lse},
                                                        {"dout", &a.dout},
                                                        {"mask", &a.mask},
                                                        {"key_lengths", &a.key_lengths},
                                                        {"alibi_slopes", &a.alibi_slopes},
                                                        {"cu_seqlens_q", &a.cu_seqlens_q},
                                                        {"cu_seqlens_k", &a.cu_seqlens_k}};
  for (const auto& [name, t] : read)
    if (t->present()) inputs.push_back(checked_span(name, *t));
  const std::pair<const char*, const Tensor*> written[] = {
      {"dq", &a.dq}, {"dk", &a.dk}, {"dv", &a.dv}};
  std::vector<Span> outputs;
  for (const auto& [name, t] : written) {
    const Span span = checked_span(name, *t);
    require_no_internal_overlap(name, *t);
    for (const Span& in : inputs)
      if (span.overlaps(in))
        fail(name,
             "overlaps an input (q, k, v, out, lse, dout, mask, key_lengths, alibi_slopes "
             "or cu_seqlens); gradients must be separate buffers");
    for (const Span& other : outputs)
      if (span.overlaps(other)) fail(name, "overlaps another gradient output (dq, dk or dv)");
    outputs.push_back(span);
  }

  p.dout = a.dout.data;
  p.dq = a.dq.data;
  p.dk = a.dk.data;
  p.dv = a.dv.data;
  p.dout_dtype = a.dout.dtype;
  p.dq_dtype = a.dq.dtype;
  p.dk_dtype = a.dk.dtype;
  p.dv_dtype = a.dv.dtype;
  const int l = rows.len(), h = rows.heads();
  p.do_stride_b = rows.stride_b(a.dout), p.do_stride_l = a.dout.stride[l],
  p.do_stride_h = a.dout.stride[h];
  p.dq_stride_b = rows.stride_b(a.dq), p.dq_stride_l = a.dq.stride[l],
  p.dq_stride_h = a.dq.stride[h];
  p.dk_stride_b = rows.stride_b(a.dk), p.dk_stride_l = a.dk.stride[l],
  p.dk_stride_h = a.dk.stride[h];
  p.dv_stride_b = rows.stride_b(a.dv), p.dv_stride_l = a.dv.stride[l],
  p.dv_stride_h = a.dv.stride[h];
  p.deterministic = a.deterministic;
  return p;
}

}  // namespace tileattn::detail
