// tileattn demo --decode: one attention layer of an inference server, serving a few sequences
// from a paged KV cache with tileattn::attention_with_kvcache. Random q, k, v stand in for the
// model's projections. The steps:
//   1. prefill: every prompt in one call; their keys and values are appended to the cache and
//      their queries attend causally to them;
//   2. decode: each step appends one new token per sequence and attends to everything so far;
//   3. check: the last step against a plain attention_forward call on each sequence's keys and
//      values gathered into one contiguous array.
// Rotary embeddings (RoPE) are applied by the library to the queries and to the keys it appends,
// so the cache holds rotated keys, as FlashAttention's flash_attn_with_kvcache does.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>

#include "compare.hpp"
#include "cuda_staging.hpp"
#include "decode.hpp"
#include "random_inputs.hpp"
#include "timing.hpp"

namespace tileattn::tools {
namespace {

// A paged KV cache: one pool of pages shared by every sequence, a page holding the keys (and
// values) of block_size tokens for all kv heads. Row b of the block table lists sequence b's
// pages in order: its key j is row j % block_size of page block_table[b][j / block_size]. Pages
// are handed out as the sequences grow, from a free list in no particular order: the library
// does not care where a sequence's pages are, and a busy server's pool is fragmented anyway.
struct PagedCache {
  std::int64_t block_size = 0;
  HostTensor k, v;         // [num_pages, block_size, Hkv, D]: the pool
  HostTensor block_table;  // i32 [B, most pages a sequence may hold]; -1 = no page yet
  HostTensor lengths;      // i32 [B]: tokens in the cache (KvCacheArgs::cache_seqlens)
  std::vector<std::int32_t> free_pages;

  std::int32_t& length(std::int64_t b) { return lengths.data_as<std::int32_t>()[b]; }

  // Gives sequence b the pages it needs to hold `tokens` tokens.
  void reserve(std::int64_t b, std::int64_t tokens) {
    std::int32_t* pages = block_table.data_as<std::int32_t>() + b * block_table.shape()[1];
    for (std::int64_t i = 0; i * block_size < tokens; ++i) {
      if (pages[i] >= 0) continue;
      if (free_pages.empty()) throw std::logic_error("demo --decode: the page pool ran out");
      pages[i] = free_pages.back();  // (a server would evict or preempt a sequence here)
      free_pages.pop_back();
    }
  }
};

// RoPE tables, f32 [positions, D / 2]: position p turns pair i by the angle p * 10000^(-2i / D).
void rotary_tables(std::int64_t positions, std::int64_t dim, HostTensor& cos, HostTensor& sin) {
  const std::int64_t half = dim / 2;
  cos = HostTensor(DType::f32, {positions, half});
  sin = HostTensor(DType::f32, {positions, half});
  for (std::int64_t p = 0; p < positions; ++p)
    for (std::int64_t i = 0; i < half; ++i) {
      const double angle =
          static_cast<double>(p) *
          std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(dim));
      cos.data_as<float>()[p * half + i] = static_cast<float>(std::cos(angle));
      sin.data_as<float>()[p * half + i] = static_cast<float>(std::sin(angle));
    }
}

// Copies `rows` token rows of `from` (starting at row `from_row`) to row `to_row` of sequence b
// of a [B, L, H, D] history.
void keep(HostTensor& history, std::int64_t b, std::int64_t to_row, const HostTensor& from,
          std::int64_t from_row, std::int64_t rows) {
  const std::size_t row_bytes =
      history.size_bytes() / static_cast<std::size_t>(history.shape()[0] * history.shape()[1]);
  std::memcpy(
      static_cast<std::byte*>(history.data()) +
          static_cast<std::size_t>(b * history.shape()[1] + to_row) * row_bytes,
      static_cast<const std::byte*>(from.data()) + static_cast<std::size_t>(from_row) * row_bytes,
      static_cast<std::size_t>(rows) * row_bytes);
}

}  // namespace

int demo_decode(DecodeDemo& o) {
  Problem& p = o.problem;
  p.resolve_defaults();
  const std::vector<std::int64_t>& prompts = o.prompt_lengths;
  if (prompts.empty() || *std::min_element(prompts.begin(), prompts.end()) < 1)
    throw ToolError("--prompt-lengths: every prompt needs at least one token");
  if (o.steps < 1 || o.block_size < 1)
    throw ToolError("demo --decode: --steps and --block-size must be at least 1");
  const Context ctx = p.context();
  const DType dtype = parse_dtype(p.dtype);
  const auto B = static_cast<std::int64_t>(prompts.size());
  const std::int64_t Hq = p.heads, Hkv = p.kv_heads, D = p.dim, bs = o.block_size;
  const std::int64_t longest = *std::max_element(prompts.begin(), prompts.end()) + o.steps;

  std::printf(
      "tileattn demo --decode: one attention layer serving %lld sequences from a paged "
      "KV cache\n",
      static_cast<long long>(B));
  std::printf(
      "  Hq=%lld query heads, Hkv=%lld kv heads, head dim %lld, %s storage, rotary "
      "embeddings, causal; %s backend\n\n",
      static_cast<long long>(Hq), static_cast<long long>(Hkv), static_cast<long long>(D),
      p.dtype.c_str(), p.backend.c_str());

  // The cache. Its pool has just the pages the sequences will need (a server sizes it by the
  // memory it has), handed out in shuffled order.
  PagedCache cache;
  cache.block_size = bs;
  std::int64_t pages = 0;
  for (const std::int64_t n : prompts) pages += (n + o.steps + bs - 1) / bs;
  cache.k = HostTensor(dtype, {pages, bs, Hkv, D});
  cache.v = HostTensor(dtype, {pages, bs, Hkv, D});
  cache.block_table = HostTensor(DType::i32, {B, (longest + bs - 1) / bs});
  std::fill_n(cache.block_table.data_as<std::int32_t>(), cache.block_table.numel(), -1);
  cache.lengths = HostTensor(DType::i32, {B});
  cache.free_pages.resize(static_cast<std::size_t>(pages));
  std::iota(cache.free_pages.begin(), cache.free_pages.end(), 0);
  std::shuffle(cache.free_pages.begin(), cache.free_pages.end(), std::mt19937_64(p.seed));
  HostTensor cos, sin;
  rotary_tables(longest, D, cos, sin);
  // For the check only: every sequence's keys and values as the model produced them (before
  // rotary), in order, in plain [B, longest, Hkv, D] arrays. A server keeps nothing of the kind.
  HostTensor k_history(dtype, {B, longest, Hkv, D}), v_history(dtype, {B, longest, Hkv, D});

  // --backend cuda: the tensors live in device memory; device_view copies a host tensor there
  // (again on each later call, so that the host side can be updated between calls). With a
  // host backend it is the host tensor's own view.
  DeviceStaging device(ctx);
  KvCacheArgs layer;  // what every call of this layer shares
  layer.k_cache = device.device_view(cache.k, "k_cache");
  layer.v_cache = device.device_view(cache.v, "v_cache");
  layer.rotary_cos = device.device_view(cos, "rotary_cos");
  layer.rotary_sin = device.device_view(sin, "rotary_sin");
  layer.causal = true;

  // 1. Prefill. The prompts are packed one after the other, [total, H, D] (the varlen layout):
  //    sequence b owns the rows offsets[b] .. offsets[b + 1] - 1 of q, k_new and v_new.
  const std::int64_t total = std::accumulate(prompts.begin(), prompts.end(), std::int64_t{0});
  HostTensor offsets(DType::i32, {B + 1});
  auto* offset = offsets.data_as<std::int32_t>();
  for (std::int64_t b = 0; b < B; ++b)
    offset[b + 1] = offset[b] + static_cast<std::int32_t>(prompts[b]);
  HostTensor q(dtype, {total, Hq, D}), k(dtype, {total, Hkv, D}), v(dtype, {total, Hkv, D});
  fill_normal(q, p.seed);
  fill_normal(k, p.seed + 1);
  fill_normal(v, p.seed + 2);
  const HostTensor prompt_out(DType::f32, {total, Hq, D});
  for (std::int64_t b = 0; b < B; ++b) {
    cache.reserve(b, prompts[b]);
    keep(k_history, b, 0, k, offset[b], prompts[b]);
    keep(v_history, b, 0, v, offset[b], prompts[b]);
  }
  KvCacheArgs prefill = layer;
  prefill.q = device.device_view(q, "q");
  prefill.k_new = device.device_view(k, "k_new");  // appended from row cache_seqlens[b] = 0
  prefill.v_new = device.device_view(v, "v_new");
  prefill.cu_seqlens_q = device.device_view(offsets, "cu_seqlens_q");
  prefill.cu_seqlens_k_new = prefill.cu_seqlens_q;  // as many new keys as queries
  prefill.max_seqlen_q = *std::max_element(prompts.begin(), prompts.end());
  prefill.block_table = device.device_view(cache.block_table, "block_table");
  prefill.cache_seqlens = device.device_view(cache.lengths, "cache_seqlens");
  prefill.out = device.device_view(prompt_out, "out", /*upload=*/false);
  const double prefill_s = seconds_since([&] {
    attention_with_kvcache(prefill, ctx);
    device.synchronize();
  });
  // The library does not advance cache_seqlens: the caller does, after the call.
  for (std::int64_t b = 0; b < B; ++b) cache.length(b) += static_cast<std::int32_t>(prompts[b]);
  std::printf("1. Prefill  %lld prompts (", static_cast<long long>(B));
  for (std::int64_t b = 0; b < B; ++b)
    std::printf("%s%lld", b > 0 ? ", " : "", static_cast<long long>(prompts[b]));
  std::printf(" tokens) in one varlen call: %.3f ms\n", prefill_s * 1e3);

  // 2. Decode: each step, every sequence gets one new token: its query attends to the sequence's
  //    cached keys and its own key, which the call appends (at row cache_seqlens[b]).
  std::printf("2. Decode   %d steps, one token per sequence per step (the time of each call):\n",
              o.steps);
  HostTensor q1(dtype, {B, 1, Hq, D}), k1(dtype, {B, 1, Hkv, D}), v1(dtype, {B, 1, Hkv, D});
  HostTensor out1(DType::f32, {B, 1, Hq, D});
  for (int step = 1; step <= o.steps; ++step) {
    fill_normal(q1, p.seed + 3 * static_cast<std::uint64_t>(step));  // the model's projections
    fill_normal(k1, p.seed + 3 * static_cast<std::uint64_t>(step) + 1);
    fill_normal(v1, p.seed + 3 * static_cast<std::uint64_t>(step) + 2);
    for (std::int64_t b = 0; b < B; ++b) {
      cache.reserve(b, cache.length(b) + 1);  // a new page when the last one is full
      keep(k_history, b, cache.length(b), k1, b, 1);
      keep(v_history, b, cache.length(b), v1, b, 1);
    }
    KvCacheArgs decode = layer;
    decode.q = device.device_view(q1, "q");
    decode.k_new = device.device_view(k1, "k_new");
    decode.v_new = device.device_view(v1, "v_new");
    decode.block_table = device.device_view(cache.block_table, "block_table");
    decode.cache_seqlens = device.device_view(cache.lengths, "cache_seqlens");
    decode.out = device.device_view(out1, "out", /*upload=*/false);
    const double step_s = seconds_since([&] {
      attention_with_kvcache(decode, ctx);
      device.synchronize();
    });
    for (std::int64_t b = 0; b < B; ++b) cache.length(b) += 1;
    std::printf("     step %3d  %8.3f ms   lengths", step, step_s * 1e3);
    for (std::int64_t b = 0; b < B; ++b) std::printf(" %d", cache.length(b));
    std::printf("\n");
  }
  device.fetch(out1);

  // 3. Check the last step with plain attention: each sequence's keys in one array, rotated at
  //    positions 0, 1, ... with apply_rotary; the last query rotated at its token's position;
  //    attention_forward with key_lengths (the reference backend) on the keys gathered so.
  Context host;  // the check runs on the host
  host.threads = p.threads;
  RotaryArgs rotate_keys;
  rotate_keys.x = rotate_keys.out = k_history.view("k");  // in place
  rotate_keys.cos = cos.view("cos");
  rotate_keys.sin = sin.view("sin");
  apply_rotary(rotate_keys, host);
  HostTensor last_position(DType::i32, {B});
  for (std::int64_t b = 0; b < B; ++b)
    last_position.data_as<std::int32_t>()[b] = cache.length(b) - 1;
  const HostTensor q_rotated(dtype, {B, 1, Hq, D});
  RotaryArgs rotate_query = rotate_keys;
  rotate_query.x = q1.view("q");
  rotate_query.out = q_rotated.view("q_rotated");
  rotate_query.seqlen_offsets = last_position.view("positions");
  apply_rotary(rotate_query, host);
  const HostTensor expected(DType::f32, {B, 1, Hq, D});
  AttentionArgs plain;
  plain.q = q_rotated.view("q");
  plain.k = k_history.view("k");
  plain.v = v_history.view("v");
  plain.out = expected.view("out");
  plain.key_lengths = cache.lengths.view("key_lengths");
  plain.causal = true;
  Context reference = host;
  reference.backend = Backend::reference;
  attention_forward(plain, reference);
  const ErrorStats error = compare(out1, expected);
  const double tolerance = p.dtype == "f32" ? 1e-5 : 1e-2;  // as for tileattn verify
  const bool ok = error.rel_l2 <= tolerance;
  std::printf(
      "3. Check    the last step vs a plain attention_forward (reference backend) on each\n"
      "            sequence's keys and values, gathered into one array:\n");
  std::printf("            out max abs error %.2e, rel L2 %.2e: %s (tolerance rel L2 %.0e)\n",
              error.max_abs, error.rel_l2, ok ? "PASS" : "FAIL", tolerance);
  return ok ? 0 : 1;
}

}  // namespace tileattn::tools
