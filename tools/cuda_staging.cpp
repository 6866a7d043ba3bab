#include "cuda_staging.hpp"

#include <string>

#if defined(TILEATTN_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace tileattn::tools {

#if defined(TILEATTN_WITH_CUDA)
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw ToolError(std::string("--backend cuda: ") + what + ": " + cudaGetErrorString(status));
}

}  // namespace

// Uploads one host buffer (or only allocates) and points `view` (bound to it) at the device copy.
DeviceStaging::Copy DeviceStaging::stage(const HostTensor& t, Tensor& view, bool upload) {
  if (!view.present()) return {};
  Copy c;
  c.bytes = t.size_bytes() > 0 ? t.size_bytes() : 16;  // never a null pointer
  check(cudaMalloc(&c.device, c.bytes), "cudaMalloc");
  copies_.push_back(c);
  if (upload && t.size_bytes() > 0)
    check(cudaMemcpy(c.device, t.data(), t.size_bytes(), cudaMemcpyHostToDevice), "cudaMemcpy");
  view.data = c.device;
  view.device = Device::cuda;
  view.device_index = 0;
  return c;
}

void DeviceStaging::download(const Copy& c, HostTensor& t) const {
  if (c.device != nullptr && t.size_bytes() > 0)
    check(cudaMemcpy(t.data(), c.device, t.size_bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy");
}

DeviceStaging::DeviceStaging(const AttentionBuffers& host, AttentionArgs& args, const Context& ctx,
                             bool upload_outputs)
    : active_(ctx.backend == Backend::cuda), stream_(ctx.cuda_stream) {
  if (!active_) return;
  stage(host.q, args.q, true);
  stage(host.k, args.k, true);
  stage(host.v, args.v, true);
  stage(host.mask, args.mask, true);
  stage(host.key_lengths, args.key_lengths, true);
  stage(host.alibi_slopes, args.alibi_slopes, true);
  stage(host.cu_seqlens_q, args.cu_seqlens_q, true);
  stage(host.cu_seqlens_k, args.cu_seqlens_k, true);
  out_ = stage(host.out, args.out, upload_outputs);
  lse_ = stage(host.lse, args.lse, upload_outputs);
}

DeviceStaging::~DeviceStaging() {
  for (const Copy& c : copies_) cudaFree(c.device);
}

void DeviceStaging::synchronize() const {
  if (active_) check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "kernel execution");
}

void DeviceStaging::fetch(AttentionBuffers& host) const {
  if (!active_) return;
  synchronize();
  download(out_, host.out);
  download(lse_, host.lse);
}

void DeviceStaging::stage_gradients(const Problem::BackwardBuffers& host,
                                    AttentionBackwardArgs& args) {
  if (!active_) return;
  stage(host.dout, args.dout, true);
  dq_ = stage(host.dq, args.dq, false);
  dk_ = stage(host.dk, args.dk, false);
  dv_ = stage(host.dv, args.dv, false);
}

void DeviceStaging::fetch_gradients(Problem::BackwardBuffers& host) const {
  if (!active_) return;
  synchronize();
  download(dq_, host.dq);
  download(dk_, host.dk);
  download(dv_, host.dv);
}

#else  // no CUDA: nothing to stage; attention_forward reports the missing backend

DeviceStaging::DeviceStaging(const AttentionBuffers& /*host*/, AttentionArgs& /*args*/,
                             const Context& /*ctx*/, bool /*upload_outputs*/) {}
DeviceStaging::~DeviceStaging() = default;
void DeviceStaging::synchronize() const {}
void DeviceStaging::fetch(AttentionBuffers& /*host*/) const {}
void DeviceStaging::stage_gradients(const Problem::BackwardBuffers& /*host*/,
                                    AttentionBackwardArgs& /*args*/) {}
void DeviceStaging::fetch_gradients(Problem::BackwardBuffers& /*host*/) const {}

#endif

}  // namespace tileattn::tools
