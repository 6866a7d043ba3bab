// Host side of the CUDA backend: AttnParams -> FlashFwdParams, choice of the instantiation
// (element type, head-dim bucket, fast or general score path), launch, error reporting.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda/cuda_forward.hpp"
#include "cuda/sm80/flash_fwd_config.hpp"
#include "cuda/sm80/flash_fwd_launch.hpp"
#include "cuda/sm80/flash_fwd_params.hpp"
#include "cuda/sm90/flash_fwd_sm90_launch.hpp"

namespace tileattn::detail {
namespace {

using cuda::ElemType;
using cuda::FlashFwdParams;

[[noreturn]] void throw_cuda(const char* what, cudaError_t status) {
  throw Error(std::string("tileattn: CUDA backend: ") + what + ": " + cudaGetErrorName(status) +
              ": " + cudaGetErrorString(status));
}

ElemType elem_type(DType d) {
  return d == DType::f16 ? ElemType::f16 : d == DType::bf16 ? ElemType::bf16 : ElemType::f32;
}

bool aligned16(const void* ptr) {
  return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0;
}

// 16-byte cp.async tile loads need 16-byte aligned rows: 2-byte elements, D and Dv multiples of
// 8, every stride a multiple of 8 elements and 16-byte aligned base pointers.
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

FlashFwdParams make_params(const AttnParams& p, int block_m) {
  FlashFwdParams k{};
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

template <typename T, int kBucket>
cudaError_t launch_bucket(const FlashFwdParams& k, bool general, cudaStream_t stream) {
  return general ? cuda::launch_flash_fwd<T, kBucket, true>(k, stream)
                 : cuda::launch_flash_fwd<T, kBucket, false>(k, stream);
}

// f32 inputs run the bf16 kernel: tiles are converted to bf16 on load (f32 accumulation).
template <typename T>
cudaError_t launch_type(int bucket, const FlashFwdParams& k, bool general, cudaStream_t stream) {
  switch (bucket) {
    case 64: return launch_bucket<T, 64>(k, general, stream);
    case 96: return launch_bucket<T, 96>(k, general, stream);
    case 128: return launch_bucket<T, 128>(k, general, stream);
    case 192: return launch_bucket<T, 192>(k, general, stream);
    default: return launch_bucket<T, 256>(k, general, stream);
  }
}

// The sm90 (wgmma) kernel runs where it was compiled in (an sm_90a target) and the device is
// compute capability 9.0, unless TILEATTN_CUDA_DISABLE_SM90=1 (tests and benchmarks use it to
// run the sm80 kernel on Hopper too).
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

template <typename T, bool kGeneral>
cudaError_t launch_sm90(int bucket, const FlashFwdParams& k, cudaStream_t stream) {
  switch (bucket) {
    case 64: return cuda::launch_flash_fwd_sm90<T, 64, kGeneral>(k, stream);
    case 128: return cuda::launch_flash_fwd_sm90<T, 128, kGeneral>(k, stream);
    default: return cuda::launch_flash_fwd_sm90<T, 256, kGeneral>(k, stream);
  }
}

// The sm90 kernel for 16-bit storage with 16-byte aligned rows; the fast score path needs
// scale > 0 (its softmax max is taken on raw scores). Returns cudaErrorNotSupported, launching
// nothing, when TMA cannot describe the tensors.
cudaError_t try_sm90(const AttnParams& p, bool general, cudaStream_t stream) {
  if (p.dtype == DType::f32 || !vector_loads_ok(p) || !use_sm90(p.device_index))
    return cudaErrorNotSupported;
  general = general || !(p.scale > 0.0f);
  const int bucket = cuda::sm90_bucket(static_cast<int>(std::max(p.dim, p.dim_v)));
  const FlashFwdParams k = make_params(p, cuda::sm90_tile_config(bucket).block_m);
  if (p.dtype == DType::f16)
    return general ? launch_sm90<__half, true>(bucket, k, stream)
                   : launch_sm90<__half, false>(bucket, k, stream);
  return general ? launch_sm90<__nv_bfloat16, true>(bucket, k, stream)
                 : launch_sm90<__nv_bfloat16, false>(bucket, k, stream);
}

// Makes `device` current for the launch and restores the caller's device afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    cudaError_t status = cudaGetDevice(&previous_);
    if (status != cudaSuccess) throw_cuda("cudaGetDevice", status);
    if (previous_ != device) {
      status = cudaSetDevice(device);
      if (status != cudaSuccess) throw_cuda("cudaSetDevice", status);
    }
    device_ = device;
  }
  ~DeviceGuard() {
    if (previous_ != device_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0, device_ = 0;
};

}  // namespace

void cuda_flash_forward(const AttnParams& p, void* stream) {
  if (p.len_q == 0) return;
  const int bucket = cuda::head_dim_bucket(static_cast<int>(std::max(p.dim, p.dim_v)));
  const cuda::TileConfig cfg = cuda::tile_config(bucket);
  const std::int64_t m_blocks = (p.len_q + cfg.block_m - 1) / cfg.block_m;
  if (p.len_q > INT_MAX - 256 || p.len_k > INT_MAX - 256 ||
      m_blocks * p.heads_q * p.batch > INT_MAX)
    throw Error(
        "tileattn: argument 'q': the CUDA backend supports sequence lengths and "
        "batch x heads x query blocks below 2^31");

  const bool general =
      p.mask != nullptr || p.softcap > 0.0f || p.alibi_slopes != nullptr || p.has_dropout();
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  DeviceGuard guard(p.device_index);
  cudaError_t status = try_sm90(p, general, cuda_stream);
  if (status == cudaErrorNotSupported) {
    const FlashFwdParams k = make_params(p, cfg.block_m);
    status = p.dtype == DType::f16 ? launch_type<__half>(bucket, k, general, cuda_stream)
                                   : launch_type<__nv_bfloat16>(bucket, k, general, cuda_stream);
  }
  if (status != cudaSuccess) throw_cuda("kernel launch", status);
}

}  // namespace tileattn::detail
