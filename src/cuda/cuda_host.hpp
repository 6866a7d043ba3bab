// Host-side pieces shared by the CUDA forward and backward entry points: error reporting,
// parameter translation (AttnParams -> FlashFwdParams), the device guard and the stream-ordered
// workspace.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/params.hpp"
#include "cuda/common/flash_bwd_params.hpp"
#include "cuda/common/flash_fwd_params.hpp"

namespace tileattn::detail {

// Throws tileattn::Error "tileattn: CUDA backend: <what>: <CUDA name>: <CUDA message>".
[[noreturn]] void throw_cuda(const char* what, cudaError_t status);

cuda::ElemType elem_type(DType d);

bool aligned16(const void* ptr);

// The sm90 (wgmma + TMA) kernels run where they were compiled in (an sm_90a target) on a device
// of compute capability 9.0, unless TILEATTN_CUDA_DISABLE_SM90=1 (tests and benchmarks use it to
// run the sm80 kernels on Hopper too).
bool use_sm90(int device);

// 16-byte cp.async tile loads need 16-byte aligned rows: 2-byte elements, D and Dv multiples of
// 8, every q/k/v stride a multiple of 8 elements and 16-byte aligned base pointers.
bool vector_loads_ok(const AttnParams& p);

// The forward's kernel parameters; num_m_blocks counts query blocks of block_m rows.
cuda::FlashFwdParams make_fwd_params(const AttnParams& p, int block_m);

// The backward's gradient views (dout, dq, dk, dv: pointers, strides, element types) and kv
// heads, shared by every backward kernel family's parameters.
void set_gradient_views(cuda::FlashBwdParams& k, const AttnBackwardParams& p);

// A caller's workspace (Context::cuda_workspace) must hold `needed` bytes, 256-byte aligned
// (tileattn::Error otherwise); null passes.
void check_given_workspace(const void* given, std::size_t given_bytes, std::size_t needed);

// Makes `device` current for the launch and restores the caller's device afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0, device_ = 0;
};

// Scratch memory ordered on `stream`: allocated from a per-device pool that keeps its memory
// (no host synchronisation, no cudaMalloc after the first calls), freed on the stream when the
// object goes out of scope, so later work on the stream may reuse it.
class StreamWorkspace {
 public:
  StreamWorkspace(std::size_t bytes, int device, cudaStream_t stream);
  ~StreamWorkspace();
  StreamWorkspace(const StreamWorkspace&) = delete;
  StreamWorkspace& operator=(const StreamWorkspace&) = delete;
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace tileattn::detail
