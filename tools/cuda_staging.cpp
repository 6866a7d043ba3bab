#include "cuda_staging.hpp"

#include <cstddef>
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

// The bytes of a host tensor's device copy: its own, or 16 when it is empty (never a null pointer).
std::size_t device_bytes(const HostTensor& t) {
  return t.size_bytes() > 0 ? t.size_bytes() : 16;
}

}  // namespace

// Uploads one host buffer (or only allocates) and points `view` (bound to it) at the device copy.
DeviceStaging::Copy DeviceStaging::stage(const HostTensor& t, Tensor& view, bool upload) {
  if (!view.present()) return {};
  Copy c;
  c.bytes = device_bytes(t);
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

DeviceStaging::DeviceStaging(const Context& ctx)
    : active_(ctx.backend == Backend::cuda), stream_(ctx.cuda_stream) {}

DeviceStaging::~DeviceStaging() {
  for (const Copy& c : copies_) cudaFree(c.device);
}

Tensor DeviceStaging::device_view(const HostTensor& host, const char* name, bool upload) {
  Tensor view = host.view(name);
  if (!active_ || !view.present()) return view;
  for (const auto& [tensor, c] : by_host_)
    if (tensor == &host && c.bytes == device_bytes(host)) {  // (a resized tensor gets a new copy)
      if (upload && host.size_bytes() > 0) {
        synchronize();  // queued work may still read the device copy
        check(cudaMemcpy(c.device, host.data(), host.size_bytes(), cudaMemcpyHostToDevice),
              "cudaMemcpy");
      }
      view.data = c.device;
      view.device = Device::cuda;
      view.device_index = 0;
      return view;
    }
  by_host_.emplace_back(&host, stage(host, view, upload));
  return view;
}

void DeviceStaging::fetch(HostTensor& host) const {
  if (!active_) return;
  synchronize();
  for (const auto& [tensor, c] : by_host_)
    if (tensor == &host && c.bytes == device_bytes(host)) {
      download(c, host);
      return;
    }
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
DeviceStaging::DeviceStaging(const Context& /*ctx*/) {}
Tensor DeviceStaging::device_view(const HostTensor& host, const char* name, bool /*upload*/) {
  return host.view(name);
}
void DeviceStaging::fetch(HostTensor& /*host*/) const {}

#endif

}  // namespace tileattn::tools
