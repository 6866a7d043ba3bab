// tileattn bench --decode: attention_with_kvcache on a decode shape (Lq new query rows per
// sequence over Lk cached keys, nothing appended), timed in rounds that alternate with a memory
// ceiling measured on the same backend (memory_stream.hpp), so that both see the same machine
// state; medians of each. Decode reads every cached key and value once per call, so its speed
// is the bytes of K and V over the time: B * Lk * Hkv * (D + Dv) * element size. Each attention
// call follows a ceiling pass, which evicts the caches: the attention reads its K and V from
// memory, as it does in a model, where the other layers' caches pass through between two calls
// for one layer.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>

#include "bench_report.hpp"
#include "cuda_staging.hpp"
#include "decode.hpp"
#include "library_info.hpp"
#include "memory_stream.hpp"
#include "random_inputs.hpp"
#include "timing.hpp"

namespace tileattn::tools {
namespace {

struct DecodeResult {
  double kv_bytes = 0.0;  // K and V bytes read per call
  Timing attention, ceiling;
  std::string isa;
  int threads = 1;
  std::int64_t num_blocks = 0;  // paged: blocks in the cache
};

double gbps(double bytes, double seconds) {
  return seconds > 0.0 ? bytes / seconds / 1e9 : 0.0;
}

void print_json(const DecodeBench& o, const MemoryStream& stream, const DecodeResult& r) {
  const double attention = gbps(r.kv_bytes, r.attention.median_s);
  const double ceiling = gbps(stream.bytes_credited(), r.ceiling.median_s);
  std::ostringstream os;
  os << "{" << problem_json_members(o.problem, r.isa, r.threads)
     << ", \"decode\": true, \"block_size\": " << o.block_size
     << ", \"num_blocks\": " << r.num_blocks << ", \"num_splits\": " << o.num_splits
     << ", \"iters\": " << r.attention.runs << ", \"warmup\": " << o.warmup
     << ", \"kv_bytes\": " << json_number(r.kv_bytes)
     << ", \"decode_median_s\": " << json_number(r.attention.median_s)
     << ", \"decode_gbps\": " << json_number(attention) << ", \"ceiling\": \"" << stream.kind()
     << "\", \"ceiling_bytes\": " << json_number(stream.bytes_credited())
     << ", \"ceiling_median_s\": " << json_number(r.ceiling.median_s)
     << ", \"ceiling_gbps\": " << json_number(ceiling)
     << ", \"decode_ceiling_ratio\": " << json_number(ceiling > 0.0 ? attention / ceiling : 0.0)
     << "}\n";
  std::cout << os.str();
}

void print_text(const DecodeBench& o, const MemoryStream& stream, const DecodeResult& r) {
  const Problem& p = o.problem;
  const double attention = gbps(r.kv_bytes, r.attention.median_s);
  const double ceiling = gbps(stream.bytes_credited(), r.ceiling.median_s);
  std::printf("tileattn bench --decode: %s\n", p.describe().c_str());
  if (o.block_size > 0)
    std::printf("  cache: paged, %lld blocks of %lld rows, block table shuffled\n",
                static_cast<long long>(r.num_blocks), static_cast<long long>(o.block_size));
  else
    std::printf("  cache: contiguous [B, Lk, Hkv, D]\n");
  const std::string splits = o.num_splits > 0 ? std::to_string(o.num_splits) : "auto";
  std::printf(
      "  backend %s (cpu isa %s), %d threads, num_splits %s, median of %d rounds after %d "
      "warm-up\n",
      p.backend.c_str(), r.isa.c_str(), r.threads, splits.c_str(), r.attention.runs, o.warmup);
  std::printf("  K+V read per call: %s = B*Lk*Hkv*(D+Dv)*%zu bytes\n",
              format_bytes(r.kv_bytes).c_str(), size_of(parse_dtype(p.dtype)));
  std::printf("  attention       %10.3f ms  %9.2f GB/s\n", r.attention.median_s * 1e3, attention);
  std::printf("  memory ceiling  %10.3f ms  %9.2f GB/s  (%s)\n", r.ceiling.median_s * 1e3, ceiling,
              stream.describe().c_str());
  std::printf("  attention / ceiling  %.2f  (GB/s ratio, rounds alternated)\n",
              ceiling > 0.0 ? attention / ceiling : 0.0);
}

}  // namespace

int bench_decode(DecodeBench& o) {
  Problem& p = o.problem;
  if (p.len_k < 1) throw ToolError("bench --decode: --lk (keys in the cache) must be at least 1");
  p.resolve_defaults();  // (where 0 would mean Lk = Lq)
  if (o.iters < 1) throw ToolError("--iters must be at least 1");
  if (o.warmup < 0) throw ToolError("--warmup must not be negative");
  if (p.batch < 1 || p.heads < 1 || p.kv_heads < 1 || p.dim < 1 || p.dim_v < 1 || p.len_q < 1 ||
      p.len_k < 1)
    throw ToolError("bench --decode: B, Hq, Hkv, D, Dv, Lq and Lk must be at least 1");
  if (o.block_size < 0) throw ToolError("--block-size must not be negative (0 = contiguous)");
  if (o.ceiling_mib < 1) throw ToolError("--ceiling-mib must be at least 1");
  const Context ctx = p.context();
  const DType dtype = parse_dtype(p.dtype);
  const std::int64_t B = p.batch, Lk = p.len_k, Hkv = p.kv_heads;
  DecodeResult r;
  r.kv_bytes =
      static_cast<double>(B * Lk * Hkv * (p.dim + p.dim_v)) * static_cast<double>(size_of(dtype));
  const bool cpu_backend = ctx.backend == Backend::cpu || ctx.backend == Backend::automatic;
  r.isa = cpu_backend ? to_string(cpu_isa_used(ctx.cpu_isa)) : "none";
  r.threads = threads_used(p.threads);
  const bool long_run = r.kv_bytes > 256.0 * 1024 * 1024;
  if (long_run)
    std::fprintf(stderr, "tileattn bench --decode: %s; generating inputs ...\n",
                 p.describe().c_str());

  // The cache, filled once: contiguous [B, Lk, Hkv, D], or paged [num_blocks, block_size, Hkv,
  // D] with each sequence's blocks drawn at random from the pool (as a long-running server's
  // pool is fragmented). No append during timing, so the calls never modify it.
  const bool paged = o.block_size > 0;
  const std::int64_t per_sequence = paged ? (Lk + o.block_size - 1) / o.block_size : 1;
  r.num_blocks = paged ? B * per_sequence : 0;
  const std::int64_t rows = paged ? o.block_size : Lk, entries = paged ? r.num_blocks : B;
  HostTensor k_cache(dtype, {entries, rows, Hkv, p.dim}, HostTensor::Uninitialized{});
  HostTensor v_cache(dtype, {entries, rows, Hkv, p.dim_v}, HostTensor::Uninitialized{});
  fill_normal(k_cache, p.seed + 1);
  fill_normal(v_cache, p.seed + 2);
  HostTensor block_table;
  if (paged) {
    block_table = HostTensor(DType::i32, {B, per_sequence});
    auto* table = block_table.data_as<std::int32_t>();
    std::iota(table, table + r.num_blocks, 0);
    std::shuffle(table, table + r.num_blocks, std::mt19937_64(p.seed));
  }
  HostTensor cache_seqlens(DType::i32, {B});
  std::fill_n(cache_seqlens.data_as<std::int32_t>(), B, static_cast<std::int32_t>(Lk));
  HostTensor q(dtype, {B, p.len_q, p.heads, p.dim}, HostTensor::Uninitialized{});
  fill_normal(q, p.seed);
  const HostTensor out(parse_dtype(p.out_dtype), {B, p.len_q, p.heads, p.dim_v});

  DeviceStaging device(ctx);  // --backend cuda: device copies
  KvCacheArgs args;
  args.q = device.device_view(q, "q");
  args.k_cache = device.device_view(k_cache, "k_cache");
  args.v_cache = device.device_view(v_cache, "v_cache");
  args.block_table = device.device_view(block_table, "block_table");
  args.cache_seqlens = device.device_view(cache_seqlens, "cache_seqlens");
  args.out = device.device_view(out, "out", /*upload=*/false);
  const AttentionArgs options = p.args();
  args.causal = options.causal;  // bottom-right, the only alignment of attention_with_kvcache
  args.window_left = options.window_left;
  args.window_right = options.window_right;
  args.softcap = options.softcap;
  args.scale = options.scale;
  args.num_splits = o.num_splits;

  MemoryStream stream(ctx, static_cast<std::size_t>(o.ceiling_mib) << 20, r.threads);
  if (long_run) std::fprintf(stderr, "tileattn bench --decode: timing ...\n");
  const std::vector<Timing> timings =
      time_interleaved("tileattn bench --decode", o.warmup, o.iters,
                       {[&] {
                          attention_with_kvcache(args, ctx);
                          device.synchronize();  // host-clock timing: wait for the GPU
                        },
                        [&] { stream.pass(); }},
                       o.max_seconds);
  r.attention = timings[0];
  r.ceiling = timings[1];

  if (o.json)
    print_json(o, stream, r);
  else
    print_text(o, stream, r);
  return 0;
}

}  // namespace tileattn::tools
