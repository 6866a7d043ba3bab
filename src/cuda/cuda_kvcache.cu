// attention_with_kvcache and apply_rotary on the device: the append (new keys rotated into their
// pages), q's rotation into a workspace copy, the split-KV decode kernel (decode_kernel.cuh) and
// the combine of its splits, all enqueued on the caller's stream.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "cuda/common/decode_split_plan.hpp"
#include "cuda/common/rotary.cuh"
#include "cuda/cuda_host.hpp"
#include "cuda/cuda_kvcache.hpp"
#include "cuda/sm80/decode_launch.hpp"
#include "tileattn/tileattn.hpp"

namespace tileattn::detail {
namespace {

constexpr int kThreads = 128;

__device__ int device_new_count(const KvCacheParams& p, int b) {
  if (p.cu_seqlens_k_new != nullptr) return p.cu_seqlens_k_new[b + 1] - p.cu_seqlens_k_new[b];
  return static_cast<int>(p.len_new);
}

__device__ int device_query_count(const KvCacheParams& p, int b) {
  const std::int32_t* cu = p.attn.cu_seqlens_q;
  return cu != nullptr ? cu[b + 1] - cu[b] : static_cast<int>(p.attn.len_q);
}

// The cache block and row of key j of sequence b (CacheLayout::block / row on the device),
// clamped into the pool.
__device__ void device_cache_slot(const CacheLayout& c, int b, std::int64_t j, std::int64_t& blk,
                                  std::int64_t& row) {
  if (c.block_table != nullptr) {
    blk = c.block_table[b * c.block_table_stride + j / c.block_size];
    row = j % c.block_size;
  } else {
    blk = c.batch_idx != nullptr ? c.batch_idx[b] : b;
    row = j;
  }
  blk = blk < 0 ? 0 : (blk >= c.num_blocks ? c.num_blocks - 1 : blk);
}

// One CTA per (sequence, new row): K rotated at its absolute position, V copied.
__global__ void __launch_bounds__(kThreads) append_kernel(const __grid_constant__ KvCacheParams p) {
  const int b = static_cast<int>(blockIdx.y);
  const int t = static_cast<int>(blockIdx.x);
  if (t >= device_new_count(p, b)) return;
  const CacheLayout& c = p.cache;
  const std::int64_t j = p.cache_seqlens[b] + t;
  const std::int64_t capacity =
      c.block_table != nullptr ? c.max_blocks * c.block_size : c.block_size;
  if (j < 0 || j >= capacity) return;  // no room: device lengths are not validated
  std::int64_t blk, row;
  device_cache_slot(c, b, j, blk, row);
  const cuda::ElemType type = cuda::elem_of(p.attn.dtype);
  const std::int64_t src_row = (p.cu_seqlens_k_new != nullptr ? p.cu_seqlens_k_new[b] : 0) + t;
  const int dim = static_cast<int>(p.attn.dim), dim_v = static_cast<int>(p.attn.dim_v);
  const int k_items = cuda::rotate_items(p.rotary, dim);
  const int heads = static_cast<int>(p.attn.heads_kv);
  for (int idx = static_cast<int>(threadIdx.x); idx < heads * k_items; idx += kThreads) {
    const int h = idx / k_items;
    const char* src = static_cast<const char*>(p.k_new) +
                      (b * p.kn_stride_b + src_row * p.kn_stride_l + h * p.kn_stride_h) * 2;
    char* dst = static_cast<char*>(c.k) +
                (blk * c.k_stride_blk + row * c.k_stride_row + h * c.k_stride_h) * 2;
    cuda::rotate_item(src, dst, type, p.rotary, j, dim, idx % k_items);
  }
  for (int idx = static_cast<int>(threadIdx.x); idx < heads * dim_v; idx += kThreads) {
    const int h = idx / dim_v, d = idx % dim_v;
    const char* src = static_cast<const char*>(p.v_new) +
                      (b * p.vn_stride_b + src_row * p.vn_stride_l + h * p.vn_stride_h) * 2;
    char* dst = static_cast<char*>(c.v) +
                (blk * c.v_stride_blk + row * c.v_stride_row + h * c.v_stride_h) * 2;
    cuda::store_elem(dst, d, type, cuda::load_elem(src, d, type));
  }
}

// One CTA per (sequence, query row): q's heads rotated into q_rot [rows][Hq][D].
__global__ void __launch_bounds__(kThreads)
    rotate_q_kernel(const __grid_constant__ KvCacheParams p, void* q_rot) {
  const int b = static_cast<int>(blockIdx.y), i = static_cast<int>(blockIdx.x);
  if (i >= device_query_count(p, b)) return;
  const AttnParams& a = p.attn;
  const std::int64_t first = a.cu_seqlens_q != nullptr ? a.cu_seqlens_q[b] : 0;
  const std::int64_t rot_row = a.cu_seqlens_q != nullptr ? first + i : b * a.len_q + i;
  const std::int64_t pos = p.cache_seqlens[b] + (p.rotary_q_per_row ? i : 0);
  const cuda::ElemType type = cuda::elem_of(a.dtype);
  const int dim = static_cast<int>(a.dim), items = cuda::rotate_items(p.rotary, dim);
  for (int idx = static_cast<int>(threadIdx.x); idx < a.heads_q * items; idx += kThreads) {
    const int h = idx / items;
    const char* src = static_cast<const char*>(a.q) +
                      (b * a.q_stride_b + (first + i) * a.q_stride_l + h * a.q_stride_h) * 2;
    char* dst = static_cast<char*>(q_rot) + ((rot_row * a.heads_q + h) * dim) * 2;
    cuda::rotate_item(src, dst, type, p.rotary, pos, dim, idx % items);
  }
}

__global__ void __launch_bounds__(kThreads)
    apply_rotary_kernel(const __grid_constant__ RotaryParams p) {
  const int b = static_cast<int>(blockIdx.y), l = static_cast<int>(blockIdx.x);
  const std::int64_t first = p.cu_seqlens != nullptr ? p.cu_seqlens[b] : 0;
  const std::int64_t rows = p.cu_seqlens != nullptr ? p.cu_seqlens[b + 1] - first : p.len;
  if (l >= rows) return;
  const std::int64_t pos = (p.seqlen_offsets != nullptr ? p.seqlen_offsets[b] : 0) + l;
  const cuda::ElemType type = cuda::elem_of(p.dtype);
  const int dim = static_cast<int>(p.dim), items = cuda::rotate_items(p.table, dim);
  const std::int64_t esize = p.dtype == DType::f32 ? 4 : 2;
  for (int idx = static_cast<int>(threadIdx.x); idx < p.heads * items; idx += kThreads) {
    const int h = idx / items;
    const char* src = static_cast<const char*>(p.x) +
                      (b * p.x_stride_b + (first + l) * p.x_stride_l + h * p.x_stride_h) * esize;
    char* dst = static_cast<char*>(p.out) +
                (b * p.o_stride_b + (first + l) * p.o_stride_l + h * p.o_stride_h) * esize;
    cuda::rotate_item(src, dst, type, p.table, pos, dim, idx % items);
  }
}

// One CTA per output row (sequence b, query row i, head hq): the splits' results merged by their
// lse (a -inf split weighs nothing; a NaN or +inf one poisons the row). Warp 0 turns the splits'
// lse into weights (lane t holds splits t, t + 32, ..); then warp w sums splits w, w + 4, .. with
// unconditional 16-byte loads (every split writes its part, zeros when empty), so that a lane's
// loads are in flight together, and the warps' sums meet in shared memory. (A warp per row with
// a load per split behind a branch ran them one after another.)
constexpr int kCombineWarps = 4;
constexpr int kCombineSplitsPerLane = 4;
static_assert(kCombineSplitsPerLane * 32 >= cuda::kMaxDecodeSplits, "a lane per split");
__global__ void __launch_bounds__(kCombineWarps * 32)
    combine_kernel(const __grid_constant__ cuda::DecodeParams d,
                   const __grid_constant__ KvCacheParams p) {
  __shared__ float weights[cuda::kMaxDecodeSplits];
  __shared__ float sums[kCombineWarps][256];  // dim_v <= 256
  __shared__ float row_lse;
  __shared__ bool row_poisoned;
  const int b = static_cast<int>(blockIdx.y), row = static_cast<int>(blockIdx.x);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const AttnParams& a = p.attn;
  const int hq_count = static_cast<int>(a.heads_q);
  const int i = row / hq_count, hq = row % hq_count;
  if (i >= cuda::query_count(d, b)) return;
  const int h = hq / d.group, pr = i * d.group + hq % d.group;
  const int tile = pr / cuda::kDecodeRows, r = pr % cuda::kDecodeRows;
  const std::int64_t base =
      (((static_cast<std::int64_t>(b) * d.heads_kv + h) * d.row_tiles + tile) * d.splits) *
          cuda::kDecodeRows +
      r;
  if (warp == 0) {
    constexpr unsigned kAll = 0xffffffffu;
    float lse[kCombineSplitsPerLane];
    float m = -INFINITY;
    bool poisoned = false;
#pragma unroll
    for (int k = 0; k < kCombineSplitsPerLane; ++k) {
      const int s = lane + 32 * k;
      lse[k] = s < d.splits ? d.part_lse[base + s * cuda::kDecodeRows] : -INFINITY;
      poisoned |= !(lse[k] < INFINITY);
      m = fmaxf(m, lse[k]);
    }
    poisoned = __any_sync(kAll, poisoned);
#pragma unroll
    for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(kAll, m, off));
    const bool empty = poisoned || m == -INFINITY;
    float weight[kCombineSplitsPerLane], total = 0.0f;
#pragma unroll
    for (int k = 0; k < kCombineSplitsPerLane; ++k) {
      weight[k] = empty || lse[k] == -INFINITY ? 0.0f : expf(lse[k] - m);
      total += weight[k];
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) total += __shfl_xor_sync(kAll, total, off);
#pragma unroll
    for (int k = 0; k < kCombineSplitsPerLane; ++k)
      weights[lane + 32 * k] = empty ? 0.0f : weight[k] / total;
    if (lane == 0) {
      row_poisoned = poisoned;
      row_lse = poisoned ? NAN : (m == -INFINITY ? -INFINITY : m + logf(total));
    }
  }
  __syncthreads();

  const float* const parts = d.part_out + base * d.dim_v;
  const std::int64_t split_pitch = static_cast<std::int64_t>(cuda::kDecodeRows) * d.dim_v;
  if (d.dim_v % 4 == 0) {  // rows of 16-byte groups (the workspace is 256-byte aligned)
    for (int c = lane * 4; c < d.dim_v; c += 128) {
      float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 8
      for (int s = warp; s < d.splits; s += kCombineWarps) {
        const float w = weights[s];
        const float4 x = __ldcg(reinterpret_cast<const float4*>(parts + s * split_pitch + c));
        acc.x += w * x.x, acc.y += w * x.y, acc.z += w * x.z, acc.w += w * x.w;
      }
      sums[warp][c] = acc.x, sums[warp][c + 1] = acc.y;
      sums[warp][c + 2] = acc.z, sums[warp][c + 3] = acc.w;
    }
  } else {
    for (int c = lane; c < d.dim_v; c += 32) {
      float acc = 0.0f;
#pragma unroll 8
      for (int s = warp; s < d.splits; s += kCombineWarps)
        acc += weights[s] * __ldcg(parts + s * split_pitch + c);
      sums[warp][c] = acc;
    }
  }
  __syncthreads();

  const std::int64_t q_row = (a.cu_seqlens_q != nullptr ? a.cu_seqlens_q[b] : 0) + i;
  char* const out =
      static_cast<char*>(a.out) + (b * a.o_stride_b + q_row * a.o_stride_l + hq * a.o_stride_h) *
                                      (a.out_dtype == DType::f32 ? 4 : 2);
  const cuda::ElemType out_type = cuda::elem_of(a.out_dtype);
  for (int c = static_cast<int>(threadIdx.x); c < d.dim_v; c += kCombineWarps * 32) {
    float acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kCombineWarps; ++w) acc += sums[w][c];
    cuda::store_elem(out, c, out_type, row_poisoned ? NAN : acc);
  }
  if (threadIdx.x == 0 && a.lse != nullptr)
    a.lse[b * a.lse_stride_b + hq * a.lse_stride_h + q_row * a.lse_stride_l] = row_lse;
}

void check_launch(const char* what) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) throw_cuda(what, status);
}

std::size_t align256(std::size_t n) {
  return (n + 255) / 256 * 256;
}

bool aligned_rows(const void* base, std::int64_t stride_a, std::int64_t stride_b,
                  std::int64_t stride_c) {
  return aligned16(base) && stride_a % 8 == 0 && stride_b % 8 == 0 && stride_c % 8 == 0;
}

// The call's launch shape and workspace: the decode kernel's grid is (splits, row tiles x kv
// heads, batch), sized from the cache's capacity (device lengths are not read here) and the
// kernel's occupancy; the workspace holds q's rotated copy and the splits' results.
struct DecodeCallPlan {
  int bucket, block_n, group, row_tiles;
  std::int64_t ctas, splits, q_rows;
  std::size_t q_bytes, out_bytes, lse_bytes;
  std::size_t workspace_bytes() const { return q_bytes + out_bytes + lse_bytes; }
};

DecodeCallPlan plan_call(const KvCacheParams& p) {
  const AttnParams& a = p.attn;
  DecodeCallPlan c{};
  c.bucket = cuda::decode_bucket(static_cast<int>(a.dim), static_cast<int>(a.dim_v));
  c.block_n = cuda::decode_block_n(c.bucket);
  c.group = static_cast<int>(a.heads_per_kv);
  c.row_tiles = static_cast<int>(
      std::max<std::int64_t>(1, (a.len_q * c.group + cuda::kDecodeRows - 1) / cuda::kDecodeRows));
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, a.device_index);
  c.ctas = a.batch * a.heads_kv * c.row_tiles;
  c.splits = cuda::plan_decode_splits(c.ctas, (p.cache.capacity() + c.block_n - 1) / c.block_n,
                                      static_cast<std::int64_t>(sms) *
                                          cuda::decode_ctas_per_sm(elem_type(a.dtype), c.bucket),
                                      p.num_splits)
                 .splits;
  c.q_rows = a.is_varlen() ? a.total_q : a.batch * a.len_q;
  c.q_bytes =
      p.rotary.present() ? align256(static_cast<std::size_t>(c.q_rows * a.heads_q * a.dim * 2)) : 0;
  const std::int64_t part_rows = c.splits > 1 ? c.ctas * c.splits * cuda::kDecodeRows : 0;
  c.out_bytes = align256(static_cast<std::size_t>(part_rows * a.dim_v * 4));
  c.lse_bytes = align256(static_cast<std::size_t>(part_rows * 4));
  return c;
}

void require_16bit(const AttnParams& a) {
  if (a.dtype == DType::f32)
    throw Error(
        "tileattn: argument 'q': the CUDA backend serves f16 and bf16 KV caches; an f32 cache "
        "runs on the CPU backend");
}

}  // namespace

std::size_t cuda_kvcache_workspace_bytes(const KvCacheParams& p) {
  require_16bit(p.attn);
  const DeviceGuard guard(p.attn.device_index);
  return plan_call(p).workspace_bytes();
}

void cuda_attention_with_kvcache(const KvCacheParams& p, void* stream_ptr, void* given_workspace,
                                 std::size_t given_bytes) {
  const AttnParams& a = p.attn;
  require_16bit(a);
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  const DeviceGuard guard(a.device_index);
  const CacheLayout& c = p.cache;
  const int B = static_cast<int>(a.batch);
  const DecodeCallPlan plan = plan_call(p);
  check_given_workspace(given_workspace, given_bytes, plan.workspace_bytes());
  const int bucket = plan.bucket, group = plan.group, row_tiles = plan.row_tiles;
  const std::int64_t splits = plan.splits, q_rows = plan.q_rows;
  const std::size_t q_bytes = plan.q_bytes, out_bytes = plan.out_bytes;
  const StreamWorkspace pooled(given_workspace != nullptr ? 0 : plan.workspace_bytes(),
                               a.device_index, stream);
  char* const ws = static_cast<char*>(given_workspace != nullptr ? given_workspace : pooled.data());

  if (p.has_new() && p.len_new > 0) {
    append_kernel<<<dim3(static_cast<unsigned>(p.len_new), static_cast<unsigned>(B)), kThreads, 0,
                    stream>>>(p);
    check_launch("attention_with_kvcache (append)");
  }

  cuda::DecodeParams d{};
  d.in_type = elem_type(a.dtype);
  d.q = a.q;
  d.q_stride_b = a.q_stride_b, d.q_stride_l = a.q_stride_l, d.q_stride_h = a.q_stride_h;
  if (p.rotary.present() && q_rows > 0) {
    rotate_q_kernel<<<dim3(static_cast<unsigned>(a.len_q), static_cast<unsigned>(B)), kThreads, 0,
                      stream>>>(p, ws);
    check_launch("attention_with_kvcache (rotary q)");
    d.q = ws;
    d.q_stride_b = a.is_varlen() ? 0 : a.len_q * a.heads_q * a.dim;
    d.q_stride_l = a.heads_q * a.dim;
    d.q_stride_h = a.dim;
  }
  if (q_rows == 0) return;
  d.cu_seqlens_q = a.cu_seqlens_q;
  d.len_q = static_cast<int>(a.len_q);
  d.k = c.k, d.v = c.v;
  d.k_stride_blk = c.k_stride_blk, d.k_stride_row = c.k_stride_row, d.k_stride_h = c.k_stride_h;
  d.v_stride_blk = c.v_stride_blk, d.v_stride_row = c.v_stride_row, d.v_stride_h = c.v_stride_h;
  d.block_table = c.block_table;
  d.block_table_stride = c.block_table_stride;
  d.block_size = static_cast<int>(c.block_size);
  d.block_div = cuda::FastDivmod(static_cast<int>(c.block_size));
  d.num_blocks = static_cast<int>(c.num_blocks);
  d.batch_idx = c.batch_idx;
  d.cache_seqlens = p.cache_seqlens;
  d.cache_leftpad = p.cache_leftpad;
  d.cu_seqlens_k_new = p.cu_seqlens_k_new;
  d.len_new = p.has_new() ? static_cast<int>(p.len_new) : 0;
  d.capacity = static_cast<int>(c.capacity());
  d.batch = B;
  d.heads_kv = static_cast<int>(a.heads_kv);
  d.group = group;
  d.dim = static_cast<int>(a.dim);
  d.dim_v = static_cast<int>(a.dim_v);
  d.group_div = cuda::FastDivmod(group);
  d.dim_v_div = cuda::FastDivmod(d.dim_v);
  d.scale = a.scale;
  d.scale_log2 = a.scale * 1.4426950408889634f;
  d.softcap = a.softcap;
  d.alibi = a.alibi_slopes;
  d.alibi_stride_b = a.alibi_stride_b, d.alibi_stride_h = a.alibi_stride_h;
  d.window_left = static_cast<int>(a.window_left);
  d.window_right = static_cast<int>(a.window_right);
  d.row_tiles = row_tiles;
  d.splits = static_cast<int>(splits);
  d.out = a.out;
  d.out_type = elem_type(a.out_dtype);
  d.o_stride_b = a.o_stride_b, d.o_stride_l = a.o_stride_l, d.o_stride_h = a.o_stride_h;
  d.lse = a.lse;
  d.lse_stride_b = a.lse_stride_b, d.lse_stride_h = a.lse_stride_h;
  d.lse_stride_l = a.lse_stride_l;
  d.part_out = reinterpret_cast<float*>(ws + q_bytes);
  d.part_lse = reinterpret_cast<float*>(ws + q_bytes + out_bytes);
  // The kernel's paged 16-byte path keeps a page's and its rows' byte offsets in 32 bits.
  const auto fits32 = [](std::int64_t elements) { return elements * 2 < (std::int64_t{1} << 31); };
  d.vector_loads = a.dim % 8 == 0 && a.dim_v % 8 == 0 &&
                   aligned_rows(c.k, c.k_stride_blk, c.k_stride_row, c.k_stride_h) &&
                   aligned_rows(c.v, c.v_stride_blk, c.v_stride_row, c.v_stride_h) &&
                   (!c.paged() || (fits32(c.k_stride_blk) && fits32(c.v_stride_blk) &&
                                   fits32(c.k_stride_row * c.block_size) &&
                                   fits32(c.v_stride_row * c.block_size)));
  d.vector_loads_q = a.dim % 8 == 0 && aligned_rows(d.q, d.q_stride_b, d.q_stride_l, d.q_stride_h);
  const cudaError_t status = cuda::launch_decode(d, bucket, stream);
  if (status != cudaSuccess) throw_cuda("attention_with_kvcache (decode)", status);
  if (splits == 1) return;  // the decode kernel wrote the result

  // The combine asks for the decode kernel's shared-memory carveout: an SM switches its
  // L1 / shared split only when idle, so a different preference would cost a drain between the
  // two kernels (a hint; its failure changes nothing).
  static const bool carveout = [] {
    const bool ok =
        cudaFuncSetAttribute(&combine_kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                             cudaSharedmemCarveoutMaxShared) == cudaSuccess;
    if (!ok) static_cast<void>(cudaGetLastError());  // not the launch's error
    return ok;
  }();
  static_cast<void>(carveout);
  combine_kernel<<<dim3(static_cast<unsigned>(a.len_q * a.heads_q), static_cast<unsigned>(B)),
                   kCombineWarps * 32, 0, stream>>>(d, p);
  check_launch("attention_with_kvcache (combine)");
}

void cuda_apply_rotary(const RotaryParams& p, void* stream_ptr) {
  if (p.batch == 0 || p.len == 0) return;
  const DeviceGuard guard(p.device_index);
  // Rows per sequence: the padded length, or (varlen) at most all rows.
  apply_rotary_kernel<<<dim3(static_cast<unsigned>(p.len), static_cast<unsigned>(p.batch)),
                        kThreads, 0, static_cast<cudaStream_t>(stream_ptr)>>>(p);
  check_launch("apply_rotary");
}

}  // namespace tileattn::detail
