#include "api/validate_kvcache.hpp"

#include <algorithm>
#include <string_view>
#include <utility>
#include <vector>

#include "api/tensor_checks.hpp"
#include "api/validate_options.hpp"

namespace tileattn::detail {
namespace {

// The split count a caller may ask for: beyond it the merge costs more than the parallelism
// gains on any machine the library targets.
constexpr int kMaxSplits = 256;

// An i32 vector [n] on q's device, contiguous.
void require_index_vector(const char* name, const Tensor& t, const Tensor& q, std::int64_t n,
                          const char* layout) {
  require_rank(name, t, 1, layout);
  if (t.dtype != DType::i32) fail(name, "dtype must be i32, got ", to_string(t.dtype));
  require_device(name, t, q);
  require_dim(name, t, 0, n, "batch");
  if (n > 1 && t.stride[0] != 1) fail(name, "must be contiguous");
  checked_span(name, t);
}

// cos and sin of a rotary table [positions, rotary_dim / 2], f32 or `dtype`, for head dim D.
RotaryTable check_rotary_table(const char* cos_name, const Tensor& cos, const char* sin_name,
                               const Tensor& sin, const Tensor& q, DType dtype, std::int64_t D,
                               bool interleaved) {
  if (cos.present() != sin.present())
    fail(cos.present() ? sin_name : cos_name, "must be given together with ",
         cos.present() ? cos_name : sin_name);
  RotaryTable table;
  if (!cos.present()) return table;
  require_rank(cos_name, cos, 2, "[max_position, rotary_dim / 2]");
  require_rank(sin_name, sin, 2, "[max_position, rotary_dim / 2]");
  for (const auto& [name, t] : {std::pair{cos_name, &cos}, std::pair{sin_name, &sin}}) {
    if (t->dtype != DType::f32 && t->dtype != dtype)
      fail(name, "dtype must be f32 or the rotated tensor's ", to_string(dtype), ", got ",
           to_string(t->dtype));
    require_device(name, *t, q);
    require_unit_inner_stride(name, *t);
    checked_span(name, *t);
  }
  if (sin.dtype != cos.dtype) fail(sin_name, "dtype differs from ", cos_name, "'s");
  require_dim(sin_name, sin, 0, cos.shape[0], "positions, must equal cos's");
  require_dim(sin_name, sin, 1, cos.shape[1], "rotary_dim / 2, must equal cos's");
  if (cos.shape[1] < 1 || 2 * cos.shape[1] > D)
    fail(cos_name, "rotary_dim = 2 * shape[1] = ", 2 * cos.shape[1], " must be in 2..D (D = ", D,
         ")");
  table.cos = cos.data;
  table.sin = sin.data;
  table.dtype = cos.dtype;
  table.cos_stride = cos.stride[0];
  table.sin_stride = sin.stride[0];
  table.dim = 2 * cos.shape[1];
  table.positions = cos.shape[0];
  table.interleaved = interleaved;
  return table;
}

void require_position(const char* what, std::int64_t b, std::int64_t last_position,
                      const RotaryTable& table) {
  if (last_position >= table.positions)
    fail("rotary_cos", "has ", table.positions, " positions but sequence ", b, "'s ", what,
         " reach position ", last_position);
}

// A [B, L, H, Dh] (or varlen [total, H, Dh]) tensor of q's dtype and device.
void require_rows(const char* name, const Tensor& t, const Tensor& q, bool varlen,
                  std::int64_t batch, std::int64_t heads, std::int64_t dim, const char* layout) {
  require_rank(name, t, varlen ? 3 : 4, layout);
  if (t.dtype != q.dtype)
    fail(name, "dtype ", to_string(t.dtype), " differs from q's ", to_string(q.dtype));
  require_device(name, t, q);
  const int off = varlen ? 1 : 0;
  if (!varlen) require_dim(name, t, 0, batch, "batch");
  require_dim(name, t, 2 - off, heads, "kv heads, must equal k_cache's");
  require_dim(name, t, 3 - off, dim, "head dim, must equal the cache's");
  require_unit_inner_stride(name, t);
}

void check_cache(KvCacheParams& p, const KvCacheArgs& a) {
  const Tensor &kc = a.k_cache, &vc = a.v_cache, &q = a.q;
  const bool paged = a.block_table.present();
  const char* layout = paged ? "[num_blocks, block_size, Hkv, D]" : "[B_cache, Lmax, Hkv, D]";
  require_rank("k_cache", kc, 4, layout);
  require_rank("v_cache", vc, 4, layout);
  for (const auto& [name, t] : {std::pair{"k_cache", &kc}, std::pair{"v_cache", &vc}}) {
    if (t->dtype != q.dtype)
      fail(name, "dtype ", to_string(t->dtype), " differs from q's ", to_string(q.dtype));
    require_device(name, *t, q);
    require_unit_inner_stride(name, *t);
  }
  const std::int64_t Hkv = kc.shape[2];
  if (Hkv < 1) fail("k_cache", "number of kv heads must be at least 1, got ", Hkv);
  if (p.attn.heads_q % Hkv != 0)
    fail("k_cache", "query heads (", p.attn.heads_q, ") must be a multiple of kv heads (", Hkv,
         ")");
  require_dim("k_cache", kc, 3, p.attn.dim, "head dim, must equal q's");
  for (int d = 0; d < 3; ++d) require_dim("v_cache", vc, d, kc.shape[d], "must equal k_cache's");
  const std::int64_t Dv = vc.shape[3];
  if (Dv < 1 || Dv > 256) fail("v_cache", "head dim Dv must be in 1..256, got ", Dv);
  if (kc.shape[1] < 1) fail("k_cache", paged ? "block_size" : "Lmax", " must be at least 1");
  if (kc.shape[0] < 1) fail("k_cache", "must hold at least one ", paged ? "block" : "sequence");

  CacheLayout& c = p.cache;
  c.k = kc.data;
  c.v = vc.data;
  c.k_stride_blk = kc.stride[0], c.k_stride_row = kc.stride[1], c.k_stride_h = kc.stride[2];
  c.v_stride_blk = vc.stride[0], c.v_stride_row = vc.stride[1], c.v_stride_h = vc.stride[2];
  c.block_size = kc.shape[1];
  c.num_blocks = kc.shape[0];
  p.attn.heads_kv = Hkv;
  p.attn.heads_per_kv = p.attn.heads_q / Hkv;
  p.attn.dim_v = Dv;

  const std::int64_t B = p.attn.batch;
  if (paged) {
    if (a.cache_batch_idx.present())
      fail("cache_batch_idx", "applies to contiguous caches only (not with block_table)");
    const Tensor& bt = a.block_table;
    require_rank("block_table", bt, 2, "[B, max_blocks_per_sequence]");
    if (bt.dtype != DType::i32) fail("block_table", "dtype must be i32, got ", to_string(bt.dtype));
    require_device("block_table", bt, q);
    require_dim("block_table", bt, 0, B, "batch");
    if (bt.shape[1] < 1) fail("block_table", "needs at least one block per sequence");
    if (bt.shape[1] > 1 && bt.stride[1] != 1) fail("block_table", "rows must be contiguous");
    checked_span("block_table", bt);
    c.block_table = static_cast<const std::int32_t*>(bt.data);
    c.block_table_stride = bt.stride[0];
    c.max_blocks = bt.shape[1];
  } else if (a.cache_batch_idx.present()) {
    require_index_vector("cache_batch_idx", a.cache_batch_idx, q, B, "[B]");
    c.batch_idx = static_cast<const std::int32_t*>(a.cache_batch_idx.data);
  } else if (kc.shape[0] < B) {
    fail("k_cache", "has ", kc.shape[0], " entries for a batch of ", B,
         " (give cache_batch_idx to choose entries)");
  }
  if (c.capacity() > kMaxLength)
    fail("block_table", "a sequence may hold ", c.capacity(), " keys, more than 2^31 - 1");
  p.attn.len_k = c.capacity();
}

void check_new_keys(KvCacheParams& p, const KvCacheArgs& a, bool varlen) {
  if (a.k_new.present() != a.v_new.present())
    fail(a.k_new.present() ? "v_new" : "k_new", "must be given together with ",
         a.k_new.present() ? "k_new" : "v_new");
  if (!a.k_new.present()) {
    if (a.cu_seqlens_k_new.present()) fail("cu_seqlens_k_new", "is given without k_new");
    return;
  }
  const std::int64_t B = p.attn.batch, Hkv = p.attn.heads_kv;
  const char* k_layout = varlen ? "[total_new, Hkv, D]" : "[B, Lnew, Hkv, D]";
  const char* v_layout = varlen ? "[total_new, Hkv, Dv]" : "[B, Lnew, Hkv, Dv]";
  require_rows("k_new", a.k_new, a.q, varlen, B, Hkv, p.attn.dim, k_layout);
  require_rows("v_new", a.v_new, a.q, varlen, B, Hkv, p.attn.dim_v, v_layout);
  const int l = varlen ? 0 : 1;
  require_dim("v_new", a.v_new, l, a.k_new.shape[l], "rows, must equal k_new's");
  p.len_new = a.k_new.shape[l];
  if (p.len_new > kMaxLength) fail("k_new", "has more than 2^31 - 1 rows");
  p.k_new = a.k_new.data;
  p.v_new = a.v_new.data;
  p.kn_stride_b = varlen ? 0 : a.k_new.stride[0];
  p.kn_stride_l = a.k_new.stride[l], p.kn_stride_h = a.k_new.stride[l + 1];
  p.vn_stride_b = varlen ? 0 : a.v_new.stride[0];
  p.vn_stride_l = a.v_new.stride[l], p.vn_stride_h = a.v_new.stride[l + 1];
  if (varlen) {
    check_cu_seqlens("cu_seqlens_k_new", a.cu_seqlens_k_new, a.q, B, p.len_new,
                     "total_new (k_new's rows)", p.cache.capacity(), "the cache's capacity");
    p.cu_seqlens_k_new = static_cast<const std::int32_t*>(a.cu_seqlens_k_new.data);
  } else if (a.cu_seqlens_k_new.present()) {
    fail("cu_seqlens_k_new", "applies to varlen queries only (give cu_seqlens_q)");
  }
}

// Host-resident indices: lengths, pages and table positions within bounds.
void check_host_indices(const KvCacheParams& p, bool appending) {
  const CacheLayout& c = p.cache;
  std::vector<std::int64_t> entries;
  for (std::int64_t b = 0; b < p.attn.batch; ++b) {
    const std::int64_t len = p.cache_seqlens[b], keys = p.key_count(b);
    if (len < 0) fail("cache_seqlens", "entry ", b, " is negative (", len, ")");
    if (p.key_first(b) < 0 || p.key_first(b) > keys)
      fail("cache_leftpad", "entry ", b, " is ", p.key_first(b), ", expected a value in [0, ", keys,
           "] (the sequence's keys)");
    if (keys > c.capacity())
      fail("cache_seqlens", "entry ", b, " (", len, ") plus its ", p.new_count(b),
           " new keys exceeds the cache's capacity of ", c.capacity(), " keys per sequence");
    if (c.paged()) {
      for (std::int64_t blk = 0; blk * c.block_size < keys; ++blk) {
        const std::int64_t page = c.block_table[b * c.block_table_stride + blk];
        if (page < 0 || page >= c.num_blocks)
          fail("block_table", "entry [", b, ", ", blk, "] is ", page, ", expected a block in [0, ",
               c.num_blocks, ")");
      }
    } else {
      const std::int64_t entry = c.block(b, 0);
      if (entry < 0 || entry >= c.num_blocks)
        fail("cache_batch_idx", "entry ", b, " is ", entry, ", expected a value in [0, ",
             c.num_blocks, ")");
      if (appending) entries.push_back(entry);
    }
    if (p.rotary.present()) {
      const std::int64_t rows = p.query_count(b);
      if (p.new_count(b) > 0) require_position("new keys", b, keys - 1, p.rotary);
      if (rows > 0)
        require_position("query rows", b, len + (p.rotary_q_per_row ? rows - 1 : 0), p.rotary);
    }
  }
  std::sort(entries.begin(), entries.end());
  if (std::adjacent_find(entries.begin(), entries.end()) != entries.end())
    fail("cache_batch_idx", "names a cache entry twice; appending would write it twice");
}

}  // namespace

KvCacheParams validate_kvcache(const KvCacheArgs& a) {
  const std::pair<const char*, const Tensor*> required[] = {{"q", &a.q},
                                                            {"k_cache", &a.k_cache},
                                                            {"v_cache", &a.v_cache},
                                                            {"cache_seqlens", &a.cache_seqlens},
                                                            {"out", &a.out}};
  for (const auto& [name, t] : required) check_tensor_header(name, *t, Presence::required);
  const std::pair<const char*, const Tensor*> optional[] = {
      {"block_table", &a.block_table},
      {"cache_batch_idx", &a.cache_batch_idx},
      {"cache_leftpad", &a.cache_leftpad},
      {"k_new", &a.k_new},
      {"v_new", &a.v_new},
      {"cu_seqlens_k_new", &a.cu_seqlens_k_new},
      {"rotary_cos", &a.rotary_cos},
      {"rotary_sin", &a.rotary_sin},
      {"lse", &a.lse},
      {"alibi_slopes", &a.alibi_slopes},
      {"cu_seqlens_q", &a.cu_seqlens_q}};
  for (const auto& [name, t] : optional) check_tensor_header(name, *t, Presence::optional);

  KvCacheParams p;
  AttnParams& at = p.attn;
  const Tensor &q = a.q, &out = a.out;
  const bool varlen = a.cu_seqlens_q.present() || a.cu_seqlens_q.rank != 0;
  require_rank("q", q, varlen ? 3 : 4, varlen ? "[total_q, Hq, D]" : "[B, Lq, Hq, D]");
  if (!is_float_storage(q.dtype))
    fail("q", "dtype must be f32, f16 or bf16, got ", to_string(q.dtype));
  if (q.device == Device::cuda && q.device_index < 0) fail("q", "CUDA device index is negative");
  require_unit_inner_stride("q", q);
  const int off = varlen ? 1 : 0;
  const std::int64_t B = varlen ? a.cu_seqlens_q.shape[0] - 1 : q.shape[0];
  const std::int64_t rows = q.shape[1 - off], Hq = q.shape[2 - off], D = q.shape[3 - off];
  if (!varlen && B < 1) fail("q", "batch size must be at least 1, got ", B);
  if (rows < 0 || rows > kMaxLength) fail("q", "query length must be in [0, 2^31 - 1], got ", rows);
  if (Hq < 1) fail("q", "number of query heads must be at least 1, got ", Hq);
  if (D < 1 || D > 256) fail("q", "head dim D must be in 1..256, got ", D);
  at.q = q.data;
  at.dtype = q.dtype;
  at.device = q.device;
  at.device_index = q.device_index;
  at.batch = B;
  at.len_q = rows;
  at.heads_q = Hq;
  at.dim = D;
  at.q_stride_b = varlen ? 0 : q.stride[0];
  at.q_stride_l = q.stride[1 - off], at.q_stride_h = q.stride[2 - off];
  if (varlen) {
    if (a.max_seqlen_q < 0 || a.max_seqlen_q > kMaxLength)
      fail("max_seqlen_q", "must be in [0, 2^31 - 1], got ", a.max_seqlen_q);
    check_cu_seqlens("cu_seqlens_q", a.cu_seqlens_q, q, B, rows, "total_q (q's rows)",
                     a.max_seqlen_q, "max_seqlen_q");
    at.cu_seqlens_q = static_cast<const std::int32_t*>(a.cu_seqlens_q.data);
    at.total_q = rows;
    at.len_q = a.max_seqlen_q;
  }

  check_cache(p, a);
  require_index_vector("cache_seqlens", a.cache_seqlens, q, B, "[B]");
  p.cache_seqlens = static_cast<const std::int32_t*>(a.cache_seqlens.data);
  if (a.cache_leftpad.present()) {
    require_index_vector("cache_leftpad", a.cache_leftpad, q, B, "[B]");
    p.cache_leftpad = static_cast<const std::int32_t*>(a.cache_leftpad.data);
  }
  check_new_keys(p, a, varlen);

  // out [B, Lq, Hq, Dv] (varlen [total_q, Hq, Dv]); f32 | f16 | bf16.
  require_rank("out", out, varlen ? 3 : 4, varlen ? "[total_q, Hq, Dv]" : "[B, Lq, Hq, Dv]");
  if (!is_float_storage(out.dtype))
    fail("out", "dtype must be f32, f16 or bf16, got ", to_string(out.dtype));
  require_device("out", out, q);
  if (!varlen) require_dim("out", out, 0, B, "batch");
  require_dim("out", out, 1 - off, rows, "query rows, must equal q's");
  require_dim("out", out, 2 - off, Hq, "query heads");
  require_dim("out", out, 3 - off, at.dim_v, "head dim Dv of v_cache");
  require_unit_inner_stride("out", out);
  at.out = out.data;
  at.out_dtype = out.dtype;
  at.o_stride_b = varlen ? 0 : out.stride[0];
  at.o_stride_l = out.stride[1 - off], at.o_stride_h = out.stride[2 - off];

  // Overlaps: out and lse are written, the cache is written when appending; nothing written
  // may overlap anything else.
  const Span out_span = checked_span("out", out);
  require_no_internal_overlap("out", out);
  const Span k_cache_span = checked_span("k_cache", a.k_cache);
  const Span v_cache_span = checked_span("v_cache", a.v_cache);
  std::vector<std::pair<const char*, Span>> read;
  for (const auto& [name, t] :
       {std::pair{"q", &a.q}, std::pair{"cache_seqlens", &a.cache_seqlens},
        std::pair{"block_table", &a.block_table}, std::pair{"cache_batch_idx", &a.cache_batch_idx},
        std::pair{"cache_leftpad", &a.cache_leftpad}, std::pair{"k_new", &a.k_new},
        std::pair{"v_new", &a.v_new}, std::pair{"cu_seqlens_k_new", &a.cu_seqlens_k_new},
        std::pair{"rotary_cos", &a.rotary_cos}, std::pair{"rotary_sin", &a.rotary_sin},
        std::pair{"alibi_slopes", &a.alibi_slopes}, std::pair{"cu_seqlens_q", &a.cu_seqlens_q}})
    if (t->present()) read.emplace_back(name, checked_span(name, *t));
  read.emplace_back("k_cache", k_cache_span);
  read.emplace_back("v_cache", v_cache_span);
  for (const auto& [name, span] : read)
    if (out_span.overlaps(span)) fail("out", "overlaps ", name, "; the output must be separate");
  if (p.has_new()) {
    if (k_cache_span.overlaps(v_cache_span))
      fail("v_cache", "overlaps k_cache; appending writes both");
    for (const auto& [name, span] : read)
      for (const auto& [cache_name, cache_span] :
           {std::pair{"k_cache", k_cache_span}, std::pair{"v_cache", v_cache_span}})
        if (name != std::string_view("k_cache") && name != std::string_view("v_cache") &&
            cache_span.overlaps(span))
          fail(name, "overlaps ", cache_name, ", which the append writes");
  }
  const Span lse_span = set_lse(at, a.lse, q, varlen, {out_span}, "out");
  for (const auto& [name, span] : read)
    if (lse_span.overlaps(span)) fail("lse", "overlaps ", name);

  set_scale_and_softcap(at, a.scale, a.softcap);
  set_window(at, a.window_left, a.window_right, a.causal, Alignment::bottom_right);
  set_alibi(at, a.alibi_slopes, q, {out_span, lse_span});

  p.rotary = check_rotary_table("rotary_cos", a.rotary_cos, "rotary_sin", a.rotary_sin, q, q.dtype,
                                D, a.rotary_interleaved);
  p.rotary_q_per_row = a.causal || a.window_left >= 0 || a.window_right >= 0;

  if (a.num_splits < 0 || a.num_splits > kMaxSplits)
    fail("num_splits", "must be in [0, ", kMaxSplits, "] (0 = the library decides), got ",
         a.num_splits);
  p.num_splits = a.num_splits;

  if (q.device == Device::cpu) check_host_indices(p, p.has_new());
  return p;
}

RotaryParams validate_rotary(const RotaryArgs& a) {
  check_tensor_header("x", a.x, Presence::required);
  check_tensor_header("out", a.out, Presence::required);
  check_tensor_header("cos", a.cos, Presence::required);
  check_tensor_header("sin", a.sin, Presence::required);
  check_tensor_header("seqlen_offsets", a.seqlen_offsets, Presence::optional);
  check_tensor_header("cu_seqlens", a.cu_seqlens, Presence::optional);
  const Tensor &x = a.x, &out = a.out;
  const bool varlen = a.cu_seqlens.present() || a.cu_seqlens.rank != 0;
  const char* layout = varlen ? "[total, H, D]" : "[B, L, H, D]";
  require_rank("x", x, varlen ? 3 : 4, layout);
  if (!is_float_storage(x.dtype))
    fail("x", "dtype must be f32, f16 or bf16, got ", to_string(x.dtype));
  if (x.device == Device::cuda && x.device_index < 0) fail("x", "CUDA device index is negative");
  require_unit_inner_stride("x", x);
  require_rank("out", out, x.rank, layout);
  if (out.dtype != x.dtype)
    fail("out", "dtype ", to_string(out.dtype), " differs from x's ", to_string(x.dtype));
  require_device("out", out, x);
  for (int d = 0; d < x.rank; ++d) require_dim("out", out, d, x.shape[d], "must equal x's");
  require_unit_inner_stride("out", out);

  RotaryParams p;
  const int off = varlen ? 1 : 0;
  p.x = x.data;
  p.out = out.data;
  p.dtype = x.dtype;
  p.device = x.device;
  p.device_index = x.device_index;
  p.batch = varlen ? a.cu_seqlens.shape[0] - 1 : x.shape[0];
  p.len = x.shape[1 - off];
  p.heads = x.shape[2 - off];
  p.dim = x.shape[3 - off];
  if (p.len > kMaxLength) fail("x", "has more than 2^31 - 1 rows");
  p.x_stride_b = varlen ? 0 : x.stride[0];
  p.x_stride_l = x.stride[1 - off], p.x_stride_h = x.stride[2 - off];
  p.o_stride_b = varlen ? 0 : out.stride[0];
  p.o_stride_l = out.stride[1 - off], p.o_stride_h = out.stride[2 - off];
  p.table = check_rotary_table("cos", a.cos, "sin", a.sin, x, x.dtype, p.dim, a.interleaved);
  if (varlen) {
    check_cu_seqlens("cu_seqlens", a.cu_seqlens, x, p.batch, p.len, "x's rows", kMaxLength, "rows");
    p.cu_seqlens = static_cast<const std::int32_t*>(a.cu_seqlens.data);
  }
  if (a.seqlen_offsets.present()) {
    require_index_vector("seqlen_offsets", a.seqlen_offsets, x, p.batch, "[B]");
    p.seqlen_offsets = static_cast<const std::int32_t*>(a.seqlen_offsets.data);
  }

  const Span x_span = checked_span("x", x), out_span = checked_span("out", out);
  require_no_internal_overlap("out", out);
  const bool same_view = x.data == out.data && std::equal(x.stride, x.stride + x.rank, out.stride);
  if (out_span.overlaps(x_span) && !same_view)
    fail("out", "overlaps x without being the same view (give out = x to rotate in place)");
  for (const auto& [name, t] :
       {std::pair{"cos", &a.cos}, std::pair{"sin", &a.sin},
        std::pair{"seqlen_offsets", &a.seqlen_offsets}, std::pair{"cu_seqlens", &a.cu_seqlens}})
    if (t->present() && out_span.overlaps(checked_span(name, *t))) fail("out", "overlaps ", name);

  if (x.device == Device::cpu) {
    for (std::int64_t b = 0; b < p.batch; ++b) {
      const std::int64_t first = p.seqlen_offsets != nullptr ? p.seqlen_offsets[b] : 0;
      const std::int64_t rows =
          varlen ? std::int64_t{p.cu_seqlens[b + 1]} - p.cu_seqlens[b] : p.len;
      if (first < 0) fail("seqlen_offsets", "entry ", b, " is negative (", first, ")");
      if (rows > 0 && first + rows - 1 >= p.table.positions)
        fail("cos", "has ", p.table.positions, " positions but sequence ", b,
             "'s rows reach position ", first + rows - 1);
    }
  }
  return p;
}

}  // namespace tileattn::detail
