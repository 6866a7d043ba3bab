#include "api/validate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace tileattn::detail {
namespace {

template <typename... Parts>
[[noreturn]] void fail(const char* argument, const Parts&... parts) {
  std::ostringstream os;
  os << "tileattn: argument '" << argument << "': ";
  (os << ... << parts);
  throw Error(os.str());
}

// Never reads past shape[3], whatever the rank says (messages are built before the rank is known
// to be valid in a few places).
std::string shape_string(const Tensor& t) {
  std::ostringstream os;
  os << '[';
  for (int d = 0; d < std::clamp(t.rank, 0, 4); ++d) os << (d ? ", " : "") << t.shape[d];
  os << ']';
  return os.str();
}

// The checks every tensor gets before any of its shape, strides or data are looked at: a rank
// the struct can hold, enum values that name something, an element-aligned data pointer.
// Optional tensors are absent only as Tensor{} (rank 0, no data); a shape without data is a
// mistake (a failed allocation, say), not a request to leave the argument out.
enum class Presence { required, optional };

void check_tensor_header(const char* name, const Tensor& t, Presence presence) {
  if (presence == Presence::optional && t.rank == 0 && t.data == nullptr) return;  // absent
  if (presence == Presence::required && t.data == nullptr)
    fail(name, "is required but has no data pointer");
  if (t.rank < 1 || t.rank > 4) fail(name, "rank must be 1..4, got ", t.rank);
  if (t.data == nullptr)
    fail(name, "has a shape but no data pointer (an absent optional tensor is Tensor{})");
  if (static_cast<unsigned>(t.dtype) > static_cast<unsigned>(DType::i64))
    fail(name, "dtype value ", static_cast<unsigned>(t.dtype), " is not a tileattn::DType");
  if (static_cast<unsigned>(t.device) > static_cast<unsigned>(Device::cuda))
    fail(name, "device value ", static_cast<unsigned>(t.device), " is not a tileattn::Device");
  const std::size_t elem = size_of(t.dtype);
  if (reinterpret_cast<std::uintptr_t>(t.data) % elem != 0)
    fail(name, "data pointer ", t.data, " is not aligned to its element size (", elem,
         " bytes for ", to_string(t.dtype), ")");
}

bool is_float_storage(DType d) {
  return d == DType::f32 || d == DType::f16 || d == DType::bf16;
}

// Byte span [lo, hi) touched by a tensor; also rejects negative sizes/strides and overflow.
struct Span {
  std::uintptr_t lo = 0, hi = 0;
  bool overlaps(const Span& o) const { return lo < o.hi && o.lo < hi; }
};

Span checked_span(const char* name, const Tensor& t) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  std::int64_t last = 0;  // offset in elements of the last element
  bool empty = false;
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] < 0) fail(name, "shape ", shape_string(t), " has a negative size");
    if (t.stride[d] < 0) fail(name, "stride ", t.stride[d], " of dimension ", d, " is negative");
    if (t.shape[d] == 0) empty = true;
    if (t.shape[d] > 1) {
      if (t.stride[d] != 0 && t.shape[d] - 1 > (kMax - last) / t.stride[d])
        fail(name, "shape ", shape_string(t), " with its strides overflows 64-bit offsets");
      last += (t.shape[d] - 1) * t.stride[d];
    }
  }
  const auto elem = static_cast<std::int64_t>(size_of(t.dtype));
  if (last > kMax / elem - 1) fail(name, "byte size overflows 64-bit offsets");
  Span s;
  if (empty) return s;
  s.lo = reinterpret_cast<std::uintptr_t>(t.data);
  s.hi = s.lo + static_cast<std::uintptr_t>((last + 1) * elem);
  return s;
}

// An output must not write two logical elements to one address (a stride 0 on a dimension of
// size > 1, rows that overlap, ...): the result would depend on the order of the writes. The
// test is sufficient, not exact: the dimensions of size > 1, sorted by stride, must each step
// over everything the smaller ones cover. It refuses a few interleavings that do not overlap
// (docs/semantics.md). Call after checked_span, which rules out negative values and overflow.
void require_no_internal_overlap(const char* name, const Tensor& t) {
  std::pair<std::int64_t, std::int64_t> dims[4];  // (stride, size) of the dimensions of size > 1
  int n = 0;
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] == 0) return;  // no element, nothing written
    if (t.shape[d] > 1) dims[n++] = {t.stride[d], t.shape[d]};
  }
  // Insertion sort: four elements at most (std::sort trips GCC 12's -Warray-bounds here).
  for (int i = 1; i < n; ++i)
    for (int j = i; j > 0 && dims[j] < dims[j - 1]; --j) std::swap(dims[j], dims[j - 1]);
  std::int64_t extent = 1;  // last offset + 1 covered by the dimensions seen so far
  for (int i = 0; i < n; ++i) {
    const auto [stride, size] = dims[i];
    if (stride < extent)
      fail(name, "strides make distinct elements share memory (shape ", shape_string(t),
           ", a stride of ", stride, " where at least ", extent,
           " is needed); an output needs one address per element");
    extent += (size - 1) * stride;
  }
}

void require_rank(const char* name, const Tensor& t, int rank, const char* layout) {
  if (t.rank != rank)
    fail(name, "expected rank ", rank, " ", layout, ", got rank ", t.rank, " ", shape_string(t));
}

void require_dim(const char* name, const Tensor& t, int d, std::int64_t expected,
                 const char* what) {
  if (t.shape[d] != expected)
    fail(name, "dimension ", d, " (", what, ") is ", t.shape[d], ", expected ", expected,
         " (shape ", shape_string(t), ")");
}

void require_device(const char* name, const Tensor& t, const Tensor& q) {
  if (t.device != q.device || t.device_index != q.device_index)
    fail(name, "must be on the same device as q");
}

void require_unit_inner_stride(const char* name, const Tensor& t) {
  if (t.shape[3] > 1 && t.stride[3] != 1)
    fail(name, "the last (head) dimension must be contiguous (stride 1), got stride ", t.stride[3]);
}

}  // namespace

AttnParams validate_forward(const AttentionArgs& a) {
  AttnParams p;
  const Tensor* required[] = {&a.q, &a.k, &a.v, &a.out};
  const char* required_names[] = {"q", "k", "v", "out"};
  const char* layouts[] = {"[B, Lq, Hq, D]", "[B, Lk, Hkv, D]", "[B, Lk, Hkv, Dv]",
                           "[B, Lq, Hq, Dv]"};
  for (int i = 0; i < 4; ++i)
    check_tensor_header(required_names[i], *required[i], Presence::required);
  const std::pair<const char*, const Tensor*> optional[] = {{"lse", &a.lse},
                                                            {"mask", &a.mask},
                                                            {"key_lengths", &a.key_lengths},
                                                            {"alibi_slopes", &a.alibi_slopes}};
  for (const auto& [name, t] : optional) check_tensor_header(name, *t, Presence::optional);
  for (int i = 0; i < 4; ++i) require_rank(required_names[i], *required[i], 4, layouts[i]);
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

  const std::int64_t B = q.shape[0], Lq = q.shape[1], Hq = q.shape[2], D = q.shape[3];
  const std::int64_t Lk = k.shape[1], Hkv = k.shape[2], Dv = v.shape[3];
  if (B < 1) fail("q", "batch size must be at least 1, got ", B);
  // Kernels index keys and rows with 32-bit lanes: lengths stay below 2^31.
  constexpr std::int64_t kMaxLength = (std::int64_t{1} << 31) - 1;
  if (Lq < 0 || Lq > kMaxLength) fail("q", "query length must be in [0, 2^31 - 1], got ", Lq);
  if (Hq < 1) fail("q", "number of query heads must be at least 1, got ", Hq);
  if (D < 1 || D > 256) fail("q", "head dim D must be in 1..256, got ", D);
  require_dim("k", k, 0, B, "batch");
  require_dim("k", k, 3, D, "head dim, must equal q's");
  if (Hkv < 1) fail("k", "number of kv heads must be at least 1, got ", Hkv);
  if (Hq % Hkv != 0) fail("k", "query heads (", Hq, ") must be a multiple of kv heads (", Hkv, ")");
  if (Lk < 0 || Lk > kMaxLength) fail("k", "key length must be in [0, 2^31 - 1], got ", Lk);
  require_dim("v", v, 0, B, "batch");
  require_dim("v", v, 1, Lk, "key length, must equal k's");
  require_dim("v", v, 2, Hkv, "kv heads, must equal k's");
  if (Dv < 1 || Dv > 256) fail("v", "head dim Dv must be in 1..256, got ", Dv);
  require_dim("out", out, 0, B, "batch");
  require_dim("out", out, 1, Lq, "query length");
  require_dim("out", out, 2, Hq, "query heads");
  require_dim("out", out, 3, Dv, "head dim Dv of v");
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
  p.heads_q = Hq;
  p.heads_kv = Hkv;
  p.dim = D;
  p.dim_v = Dv;
  p.heads_per_kv = Hq / Hkv;
  p.q_stride_b = q.stride[0], p.q_stride_l = q.stride[1], p.q_stride_h = q.stride[2];
  p.k_stride_b = k.stride[0], p.k_stride_l = k.stride[1], p.k_stride_h = k.stride[2];
  p.v_stride_b = v.stride[0], p.v_stride_l = v.stride[1], p.v_stride_h = v.stride[2];
  p.o_stride_b = out.stride[0], p.o_stride_l = out.stride[1], p.o_stride_h = out.stride[2];

  Span lse_span;  // empty when there is no lse: overlaps nothing
  if (a.lse.present()) {
    const Tensor& lse = a.lse;
    require_rank("lse", lse, 3, "[B, Hq, Lq]");
    if (lse.dtype != DType::f32) fail("lse", "dtype must be f32, got ", to_string(lse.dtype));
    require_device("lse", lse, q);
    require_dim("lse", lse, 0, B, "batch");
    require_dim("lse", lse, 1, Hq, "query heads");
    require_dim("lse", lse, 2, Lq, "query length");
    lse_span = checked_span("lse", lse);
    require_no_internal_overlap("lse", lse);
    if (lse_span.overlaps(q_span) || lse_span.overlaps(k_span) || lse_span.overlaps(v_span) ||
        lse_span.overlaps(out_span))
      fail("lse", "overlaps q, k, v or out");
    p.lse = static_cast<float*>(lse.data);
    p.lse_stride_b = lse.stride[0], p.lse_stride_h = lse.stride[1], p.lse_stride_l = lse.stride[2];
  }

  if (a.scale.has_value() && !std::isfinite(*a.scale))
    fail("scale", "must be finite, got ", *a.scale);
  p.scale = a.scale.has_value() ? *a.scale : 1.0f / std::sqrt(static_cast<float>(D));
  if (!std::isfinite(a.softcap) || a.softcap < 0.0f)
    fail("softcap", "must be finite and >= 0 (0 disables), got ", a.softcap);
  p.softcap = a.softcap;

  if (a.window_left < -1)
    fail("window_left", "must be >= 0, or -1 for unbounded, got ", a.window_left);
  if (a.window_right < -1)
    fail("window_right", "must be >= 0, or -1 for unbounded, got ", a.window_right);
  if (a.alignment != Alignment::bottom_right && a.alignment != Alignment::top_left)
    fail("alignment", "value ", static_cast<unsigned>(a.alignment),
         " is not a tileattn::Alignment (bottom_right or top_left)");
  p.alignment = a.alignment;
  // A window wider than Lq + Lk is unbounded in effect; clamping keeps index arithmetic in range.
  const auto clamp_window = [&](std::int64_t w) {
    return w == kUnbounded ? w : std::min(w, Lq + Lk);
  };
  p.window_left = clamp_window(a.window_left);
  p.window_right = clamp_window(a.window_right);
  if (a.causal)
    p.window_right = p.window_right == kUnbounded ? 0 : std::min<std::int64_t>(p.window_right, 0);

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
        if (len < 0 || len > Lk)
          fail("key_lengths", "entry ", b, " is ", len, ", expected a value in [0, ", Lk, "]");
      }
    }
  }

  if (a.alibi_slopes.present()) {
    const Tensor& s = a.alibi_slopes;
    if (s.rank != 1 && s.rank != 2)
      fail("alibi_slopes", "expected rank 1 [Hq] or 2 [B, Hq], got rank ", s.rank);
    if (s.dtype != DType::f32) fail("alibi_slopes", "dtype must be f32, got ", to_string(s.dtype));
    require_device("alibi_slopes", s, q);
    if (s.rank == 1) {
      require_dim("alibi_slopes", s, 0, Hq, "query heads");
      p.alibi_stride_h = s.stride[0];
    } else {
      require_dim("alibi_slopes", s, 0, B, "batch");
      require_dim("alibi_slopes", s, 1, Hq, "query heads");
      p.alibi_stride_b = s.stride[0];
      p.alibi_stride_h = s.stride[1];
    }
    const Span slopes_span = checked_span("alibi_slopes", s);
    if (slopes_span.overlaps(out_span) || slopes_span.overlaps(lse_span))
      fail("alibi_slopes", "overlaps out or lse");
    p.alibi_slopes = static_cast<const float*>(s.data);
  }

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

// dout, dq, dk, dv: a rank-4 float tensor shaped like `model` on q's device.
void require_like(const char* name, const Tensor& t, const Tensor& model, const char* model_name,
                  const char* layout, const Tensor& q) {
  require_rank(name, t, 4, layout);
  if (!is_float_storage(t.dtype))
    fail(name, "dtype must be f32, f16 or bf16, got ", to_string(t.dtype));
  require_device(name, t, q);
  for (int d = 0; d < 4; ++d)
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
  require_like("dout", a.dout, a.out, "out", "[B, Lq, Hq, Dv]", a.q);
  require_like("dq", a.dq, a.q, "q", "[B, Lq, Hq, D]", a.q);
  require_like("dk", a.dk, a.k, "k", "[B, Lk, Hkv, D]", a.q);
  require_like("dv", a.dv, a.v, "v", "[B, Lk, Hkv, Dv]", a.q);

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
                                                        {"alibi_slopes", &a.alibi_slopes}};
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
             "overlaps an input (q, k, v, out, lse, dout, mask, key_lengths or "
             "alibi_slopes); gradients must be separate buffers");
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
  p.do_stride_b = a.dout.stride[0], p.do_stride_l = a.dout.stride[1],
  p.do_stride_h = a.dout.stride[2];
  p.dq_stride_b = a.dq.stride[0], p.dq_stride_l = a.dq.stride[1], p.dq_stride_h = a.dq.stride[2];
  p.dk_stride_b = a.dk.stride[0], p.dk_stride_l = a.dk.stride[1], p.dk_stride_h = a.dk.stride[2];
  p.dv_stride_b = a.dv.stride[0], p.dv_stride_l = a.dv.stride[1], p.dv_stride_h = a.dv.stride[2];
  p.deterministic = a.deterministic;
  return p;
}

}  // namespace tileattn::detail
