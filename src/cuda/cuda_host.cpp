// Host-side pieces shared by the CUDA entry points (see cuda_host.hpp).
#include "cuda/cuda_host.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace tileattn::detail {

[[noreturn]] void throw_cuda(const char* what, cudaError_t status) {
  throw Error(std::string("tileattn: CUDA backend: ") + what + ": " + cudaGetErrorName(status) +
              ": " + cudaGetErrorString(status));
}

cuda::ElemType elem_type(DType d) {
  using cuda::ElemType;
  return d == DType::f16 ? ElemType::f16 : d == DType::bf16 ? ElemType::bf16 : ElemType::f32;
}

bool use_sm90(int device) {
#if defined(TILEATTN_CUDA_SM90A)
  static const bool disabled = [] {
    const char* env = std::getenv("TILEATTN_CUDA_DISABLE_SM90");
    return env != nullptr && std::strcmp(env, "1") == 0;
  }();
  if (disabled) return false;
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
    return false;
  return major == 9 && minor == 0;
#else
  (void)device;
  return false;
#endif
}

bool aligned16(const void* ptr) {
  return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0;
}

bool vector_loads_ok(const AttnParams& p) {
  if (p.dtype == DType::f32 || p.dim % 8 != 0 || p.dim_v % 8 != 0) return false;
  if (!aligned16(p.q) || !aligned16(p.k) || !aligned16(p.v)) return false;
  const std::int64_t strides[] = {p.q_stride_b, p.q_stride_l, p.q_stride_h,
                                  p.k_stride_b, p.k_stride_l, p.k_stride_h,
                                  p.v_stride_b, p.v_stride_l, p.v_stride_h};
  for (std::int64_t s : strides)
    if (s % 8 != 0) return false;
  return true;
}

cuda::FlashFwdParams make_fwd_params(const AttnParams& p, int block_m) {
  cuda::FlashFwdParams k{};
  k.q = p.q;
  k.k = p.k;
  k.v = p.v;
  k.out = p.out;
  k.lse = p.lse;
  k.q_stride_b = p.q_stride_b, k.q_stride_l = p.q_stride_l, k.q_stride_h = p.q_stride_h;
  k.k_stride_b = p.k_stride_b, k.k_stride_l = p.k_stride_l, k.k_stride_h = p.k_stride_h;
  k.v_stride_b = p.v_stride_b, k.v_stride_l = p.v_stride_l, k.v_stride_h = p.v_stride_h;
  k.o_stride_b = p.o_stride_b, k.o_stride_l = p.o_stride_l, k.o_stride_h = p.o_stride_h;
  k.lse_stride_b = p.lse_stride_b, k.lse_stride_h = p.lse_stride_h;
  k.lse_stride_l = p.lse_stride_l;
  k.batch = static_cast<int>(p.batch);
  k.len_q = static_cast<int>(p.len_q);
  k.len_k = static_cast<int>(p.len_k);
  k.heads_q = static_cast<int>(p.heads_q);
  k.heads_per_kv = static_cast<int>(p.heads_per_kv);
  k.dim = static_cast<int>(p.dim);
  k.dim_v = static_cast<int>(p.dim_v);
  k.num_m_blocks = static_cast<int>((p.len_q + block_m - 1) / block_m);
  k.in_type = elem_type(p.dtype);
  k.out_type = elem_type(p.out_dtype);
  k.vector_loads = vector_loads_ok(p);
  const std::int64_t out_esize = p.out_dtype == DType::f32 ? 4 : 2;
  k.pair_stores = reinterpret_cast<std::uintptr_t>(p.out) % (2 * out_esize) == 0 &&
                  p.o_stride_b % 2 == 0 && p.o_stride_l % 2 == 0 && p.o_stride_h % 2 == 0;
  k.vector_stores = p.out_dtype == p.dtype && p.dtype != DType::f32 && p.dim_v % 8 == 0 &&
                    aligned16(p.out) && p.o_stride_b % 8 == 0 && p.o_stride_l % 8 == 0 &&
                    p.o_stride_h % 8 == 0;
  k.scale = p.scale;
  k.scale_log2 = p.scale * cuda::kLog2e;
  k.softcap = p.softcap;
  k.window_left = p.window_left;
  k.window_right = p.window_right;
  k.bottom_right = p.alignment == Alignment::bottom_right;
  k.key_lengths = p.key_lengths;
  k.cu_seqlens_q = p.cu_seqlens_q;
  k.cu_seqlens_k = p.cu_seqlens_k;
  k.total_q = static_cast<int>(p.total_q);
  k.total_k = static_cast<int>(p.total_k);
  k.key_lengths_i64 = p.key_lengths_dtype == DType::i64;
  k.mask = p.mask;
  k.mask_additive = p.mask_dtype == DType::f32;
  k.mask_stride_b = p.mask_stride_b, k.mask_stride_h = p.mask_stride_h;
  k.mask_stride_q = p.mask_stride_q, k.mask_stride_k = p.mask_stride_k;
  k.alibi_slopes = p.alibi_slopes;
  k.alibi_stride_b = p.alibi_stride_b, k.alibi_stride_h = p.alibi_stride_h;
  k.dropout_seed = p.dropout.seed;
  k.dropout_offset = p.dropout.offset;
  k.dropout_threshold = p.dropout.threshold;
  k.dropout_keep_scale = p.dropout.keep_scale;
  return k;
}

DeviceGuard::DeviceGuard(int device) {
  cudaError_t status = cudaGetDevice(&previous_);
  if (status != cudaSuccess) throw_cuda("cudaGetDevice", status);
  if (previous_ != device) {
    status = cudaSetDevice(device);
    if (status != cudaSuccess) throw_cuda("cudaSetDevice", status);
  }
  device_ = device;
}

DeviceGuard::~DeviceGuard() {
  if (previous_ != device_) cudaSetDevice(previous_);
}

namespace {

// One memory pool per device, created on first use, that never trims its memory (release
// threshold: unlimited), so steady-state calls allocate without touching the driver's mappings.
cudaMemPool_t workspace_pool(int device) {
  static std::mutex mutex;
  static std::vector<cudaMemPool_t> pools;
  const std::lock_guard<std::mutex> lock(mutex);
  if (device >= static_cast<int>(pools.size())) pools.resize(static_cast<std::size_t>(device) + 1);
  cudaMemPool_t& pool = pools[static_cast<std::size_t>(device)];
  if (pool == nullptr) {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cudaError_t status = cudaMemPoolCreate(&pool, &props);
    if (status != cudaSuccess) {
      pool = nullptr;
      throw_cuda("cudaMemPoolCreate", status);
    }
    std::uint64_t keep_everything = UINT64_MAX;
    status = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_everything);
    if (status != cudaSuccess) throw_cuda("cudaMemPoolSetAttribute", status);
  }
  return pool;
}

}  // namespace

void check_given_workspace(const void* given, std::size_t given_bytes, std::size_t needed) {
  if (given == nullptr) return;
  if (given_bytes < needed)
    throw Error("tileattn: argument 'ctx.cuda_workspace': " + std::to_string(given_bytes) +
                " bytes given, the call needs " + std::to_string(needed));
  if (reinterpret_cast<std::uintptr_t>(given) % 256 != 0)
    throw Error("tileattn: argument 'ctx.cuda_workspace': must be 256-byte aligned");
}

StreamWorkspace::StreamWorkspace(std::size_t bytes, int device, cudaStream_t stream)
    : stream_(stream) {
  if (bytes == 0) return;
  const cudaError_t status = cudaMallocFromPoolAsync(&data_, bytes, workspace_pool(device), stream);
  if (status != cudaSuccess) throw_cuda("workspace allocation", status);
}

StreamWorkspace::~StreamWorkspace() {
  if (data_ != nullptr) cudaFreeAsync(data_, stream_);
}

void set_gradient_views(cuda::FlashBwdParams& k, const AttnBackwardParams& p) {
  k.dout = p.dout;
  k.dq = p.dq;
  k.dk = p.dk;
  k.dv = p.dv;
  k.do_stride_b = p.do_stride_b, k.do_stride_l = p.do_stride_l, k.do_stride_h = p.do_stride_h;
  k.dq_stride_b = p.dq_stride_b, k.dq_stride_l = p.dq_stride_l, k.dq_stride_h = p.dq_stride_h;
  k.dk_stride_b = p.dk_stride_b, k.dk_stride_l = p.dk_stride_l, k.dk_stride_h = p.dk_stride_h;
  k.dv_stride_b = p.dv_stride_b, k.dv_stride_l = p.dv_stride_l, k.dv_stride_h = p.dv_stride_h;
  k.dout_type = elem_type(p.dout_dtype);
  k.dq_type = elem_type(p.dq_dtype);
  k.dk_type = elem_type(p.dk_dtype);
  k.dv_type = elem_type(p.dv_dtype);
  k.heads_kv = static_cast<int>(p.heads_kv);
}

}  // namespace tileattn::detail
