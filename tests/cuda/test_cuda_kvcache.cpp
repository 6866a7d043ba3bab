// attention_with_kvcache and apply_rotary on the CUDA backend: the CPU suite's cases
// (tests/cpu/kvcache_case.hpp) copied byte for byte to the device. out and lse against the
// test-built oracle (16-bit tolerances: the kernel multiplies bf16/f16 probabilities); the
// appended caches bitwise equal to the CPU backend's (both rotate with unfused f32 arithmetic);
// split counts and page layouts agree; NaN in unwritten pages never leaks.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_case.hpp"
#include "kvcache_case.hpp"

namespace tileattn::test {
namespace {

// A device copy of a host vector (i32 indices, f32 slopes).
class DeviceVector {
 public:
  template <typename T>
  explicit DeviceVector(const std::vector<T>& host) : bytes_(host.size() * sizeof(T)) {
    if (bytes_ == 0) return;
    if (cudaMalloc(&data_, bytes_) != cudaSuccess) data_ = nullptr;
    if (data_ != nullptr) cudaMemcpy(data_, host.data(), bytes_, cudaMemcpyHostToDevice);
  }
  ~DeviceVector() { cudaFree(data_); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;
  void* data() const { return data_; }

 private:
  std::size_t bytes_ = 0;
  void* data_ = nullptr;
};

Tensor on_device(Tensor t, const DeviceVector& d) {
  t.data = d.data();
  t.device = Device::cuda;
  return t;
}

// The problem's tensors on the device and the call's arguments pointing at them.
struct DeviceKv {
  DeviceTensor q, k_cache, v_cache, k_new, v_new, cos, sin, out, lse;
  DeviceVector seqlens, leftpad, block_table, batch_idx, cu_q, cu_new, slopes;
  KvCacheArgs args;

  explicit DeviceKv(KvProblem& p)
      : q(p.q),
        k_cache(p.k_cache),
        v_cache(p.v_cache),
        k_new(p.k_new),
        v_new(p.v_new),
        cos(p.cos),
        sin(p.sin),
        out(p.out),
        lse(p.lse),
        seqlens(p.seqlens),
        leftpad(p.leftpad),
        block_table(p.block_table),
        batch_idx(p.batch_idx),
        cu_q(p.cu_q),
        cu_new(p.cu_new),
        slopes(p.slopes) {
    args = p.args();
    args.q = q.view();
    args.k_cache = k_cache.view();
    args.v_cache = v_cache.view();
    if (args.k_new.present()) {
      args.k_new = k_new.view();
      args.v_new = v_new.view();
    }
    if (args.rotary_cos.present()) {
      args.rotary_cos = cos.view();
      args.rotary_sin = sin.view();
    }
    args.out = out.view();
    args.lse = lse.view();
    args.cache_seqlens = on_device(args.cache_seqlens, seqlens);
    if (args.cache_leftpad.present()) args.cache_leftpad = on_device(args.cache_leftpad, leftpad);
    if (args.block_table.present()) args.block_table = on_device(args.block_table, block_table);
    if (args.cache_batch_idx.present())
      args.cache_batch_idx = on_device(args.cache_batch_idx, batch_idx);
    if (args.cu_seqlens_q.present()) args.cu_seqlens_q = on_device(args.cu_seqlens_q, cu_q);
    if (args.cu_seqlens_k_new.present())
      args.cu_seqlens_k_new = on_device(args.cu_seqlens_k_new, cu_new);
    if (args.alibi_slopes.present()) args.alibi_slopes = on_device(args.alibi_slopes, slopes);
  }

  void run(KvProblem& p, void* workspace = nullptr, std::size_t workspace_bytes = 0) {
    Context ctx;
    ctx.backend = Backend::cuda;
    ctx.cuda_workspace = workspace;
    ctx.cuda_workspace_bytes = workspace_bytes;
    attention_with_kvcache(args, ctx);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    out.download(p.out);
    lse.download(p.lse);
    k_cache.download(p.k_cache);
    v_cache.download(p.v_cache);
  }
};

std::vector<KvCase> cuda_cases() {
  std::vector<KvCase> v;
  KvCase c;
  c.name = "decode_gqa4_d128";
  c.cache_len = {1000, 7, 300};
  c.len_q = {1};
  c.len_new = 1;
  c.Hq = 16;
  c.Hkv = 4;
  c.D = 128;
  c.Dv = 128;
  v.push_back(c);
  c.name = "paged16_rotary_half_d128";
  c.block_size = 16;
  c.rotary_dim = 128;
  v.push_back(c);
  c.name = "paged256_rotary_interleaved_causal_lq4";
  c.block_size = 256;
  c.rotary_dim = 64;
  c.interleaved = true;
  c.causal = true;
  c.len_q = {4};
  c.len_new = 4;
  v.push_back(c);
  c = KvCase{};
  c.name = "paged1_window_softcap_alibi_d64";
  c.cache_len = {200, 63};
  c.len_q = {3};
  c.len_new = 3;
  c.block_size = 1;
  c.causal = true;
  c.window_left = 50;
  c.softcap = 5.0f;
  c.alibi = true;
  v.push_back(c);
  c = KvCase{};
  c.name = "batch_idx_mqa_d256_dv128_splits5";
  c.cache_len = {90, 777, 0};
  c.len_q = {2};
  c.len_new = 2;
  c.batch_idx = true;
  c.Hq = 8;
  c.Hkv = 1;
  c.D = 256;
  c.Dv = 128;
  c.num_splits = 5;
  v.push_back(c);
  c = KvCase{};
  c.name = "varlen_chunked_prefill_paged64";
  c.varlen = true;
  c.cache_len = {10, 4, 130};
  c.len_q = {5, 0, 70};
  c.len_new_varlen = {5, 0, 70};
  c.block_size = 64;
  c.causal = true;
  c.rotary_dim = 32;
  v.push_back(c);
  c = KvCase{};
  c.name = "odd_dims_d40_dv24";
  c.cache_len = {45, 17};
  c.len_q = {2};
  c.len_new = 2;
  c.block_size = 16;
  c.D = 40;
  c.Dv = 24;
  c.causal = true;
  v.push_back(c);
  c = KvCase{};
  c.name = "left_padded_paged16_causal_alibi_rotary_lq2";
  c.cache_len = {40, 1300, 5, 0};
  c.leftpad = {7, 290, 7, 0};  // 7 of 5 + 2: nothing left to attend to
  c.len_q = {2};
  c.len_new = 2;
  c.block_size = 16;
  c.rotary_dim = 32;
  c.causal = true;
  c.alibi = true;
  v.push_back(c);
  c = KvCase{};
  c.name = "no_keys_at_all";
  c.cache_len = {0, 3};
  c.len_q = {1};
  c.block_size = 16;
  v.push_back(c);
  return v;
}

class CudaKvCache : public ::testing::TestWithParam<KvCase> {};

TEST_P(CudaKvCache, MatchesOracleAndAppendsAsTheCpu) {
  TILEATTN_REQUIRE_CUDA();
  TILEATTN_TRACE_SEED();
  Rng rng = make_rng();
  for (const DType dtype : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(to_string(dtype));
    KvProblem p(GetParam(), dtype, rng);
    p.out.poison();
    p.lse.poison();
    KvProblem cpu = p;
    DeviceKv device(p);
    device.run(p);
    expect_matches_oracle(p, dtype == DType::bf16 ? 1e-2 : 3e-3, 1e-2, 2e-3);
    expect_append_exact(p);
    Context ctx;
    ctx.backend = Backend::cpu;
    attention_with_kvcache(cpu.args(), ctx);
    EXPECT_EQ(p.k_cache.bytes(), cpu.k_cache.bytes()) << "the CUDA and CPU appends differ";
    EXPECT_EQ(p.v_cache.bytes(), cpu.v_cache.bytes()) << "the CUDA and CPU appends differ";
  }
}

TEST_P(CudaKvCache, SplitCountsAgree) {
  TILEATTN_REQUIRE_CUDA();
  TILEATTN_TRACE_SEED();
  Rng rng = make_rng();
  KvCase c = GetParam();
  std::vector<float> first;
  for (const int splits : {1, 3, 64}) {
    c.num_splits = splits;
    Rng same = rng;
    KvProblem p(c, DType::bf16, same);
    DeviceKv device(p);
    device.run(p);
    expect_matches_oracle(p, 1e-2, 1e-2, 2e-3);
    if (first.empty()) {
      first = p.out.to_f32();
      continue;
    }
    // Splits change where P is rounded to bf16 (against each split's running max) and the
    // f32 sums' order, and the bf16 output rounds the difference to a whole ulp (2^-8 relative)
    // on some elements: about 1e-4 relative L2 between split counts. A dropped or doubled
    // split, a wrong merge weight, differs by far more (the oracle check above bounds each).
    const ErrorStats e = compare(p.out.to_f32(), first);
    EXPECT_LE(e.rel_l2, 2e-3) << "num_splits " << splits << ": " << e.str();
  }
}

// A caller's workspace (Context::cuda_workspace, NaN-poisoned, exactly the bytes asked for) gives
// the pooled workspace's result bitwise; one byte short is refused.
TEST_P(CudaKvCache, CallersWorkspaceGivesThePooledResult) {
  TILEATTN_REQUIRE_CUDA();
  TILEATTN_TRACE_SEED();
  Rng rng = make_rng();
  KvCase c = GetParam();
  c.num_splits = 3;  // split results live in the workspace
  KvProblem pooled(c, DType::bf16, rng);
  KvProblem given = pooled;
  DeviceKv device(pooled);
  device.run(pooled);
  Context ctx;
  ctx.backend = Backend::cuda;
  const std::size_t bytes = attention_with_kvcache_workspace_bytes(device.args, ctx);
  if (bytes == 0)  // a cache of one key block runs unsplit whatever num_splits asks
    GTEST_SKIP() << "one key block: the call needs no workspace";
  void* workspace = nullptr;
  ASSERT_EQ(cudaMalloc(&workspace, bytes), cudaSuccess);
  ASSERT_EQ(cudaMemset(workspace, 0xff, bytes), cudaSuccess);
  DeviceKv device_given(given);
  ctx.cuda_workspace = workspace;
  ctx.cuda_workspace_bytes = bytes - 1;
  EXPECT_THROW(attention_with_kvcache(device_given.args, ctx), Error);
  device_given.run(given, workspace, bytes);
  cudaFree(workspace);
  EXPECT_EQ(given.out.bytes(), pooled.out.bytes());
  EXPECT_EQ(given.lse.bytes(), pooled.lse.bytes());
  EXPECT_EQ(given.k_cache.bytes(), pooled.k_cache.bytes());
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaKvCache, ::testing::ValuesIn(cuda_cases()),
                         [](const auto& param_info) { return param_info.param.name; });

TEST(CudaApplyRotary, EqualsTheCpuBitwise) {
  TILEATTN_REQUIRE_CUDA();
  TILEATTN_TRACE_SEED();
  Rng rng = make_rng();
  for (const bool interleaved : {false, true}) {
    const std::int64_t B = 2, L = 33, H = 4, D = 80, rd = 64, positions = 200;
    HostTensor x = HostTensor::operand(DType::bf16, B, L, H, D, Layout::padded_bshd);
    x.fill_normal(rng);
    HostTensor cos = HostTensor::contiguous(DType::f32, {positions, rd / 2});
    HostTensor sin = HostTensor::contiguous(DType::f32, {positions, rd / 2});
    cos.fill_normal(rng);
    sin.fill_normal(rng);
    const std::vector<std::int32_t> offsets{3, 150};
    HostTensor cpu_out = x;
    RotaryArgs a;
    a.x = x.view();
    a.out = cpu_out.view();
    a.cos = cos.view();
    a.sin = sin.view();
    a.interleaved = interleaved;
    a.seqlen_offsets = make_tensor(offsets.data(), DType::i32, {B});
    apply_rotary(a);
    DeviceTensor dx(x), dcos(cos), dsin(sin);
    DeviceVector doff(offsets);
    RotaryArgs d = a;
    d.x = d.out = dx.view();  // in place on the device
    d.cos = dcos.view();
    d.sin = dsin.view();
    d.seqlen_offsets = on_device(a.seqlen_offsets, doff);
    apply_rotary(d);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    HostTensor gpu_out = x;
    dx.download(gpu_out);
    EXPECT_EQ(gpu_out.bytes(), cpu_out.bytes()) << (interleaved ? "interleaved" : "half-split");
  }
}

}  // namespace
}  // namespace tileattn::test
