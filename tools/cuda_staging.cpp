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

DeviceStaging::DeviceStaging(const AttentionBuffers& host, AttentionArgs& args, const Context& ctx)
    : active_(ctx.backend == Backend::cuda), stream_(ctx.cuda_stream) {
  if (!active_) return;
  // Uploads one host buffer and points `view` (bound to it) at the device copy.
  const auto stage = [&](const HostTensor& t, Tensor& view, bool upload) -> Copy {
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
  };
  stage(host.q, args.q, true);
  stage(host.k, args.k, true);
  stage(host.v, args.v, true);
  stage(host.mask, args.mask, true);
  stage(host.key_lengths, args.key_lengths, true);
  stage(host.alibi_slopes, args.alibi_slopes, true);
  out_ = stage(host.out, args.out, false);
  lse_ = stage(host.lse, args.lse, false);
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
  if (out_.device != nullptr && host.out.size_bytes() > 0)
    check(cudaMemcpy(host.out.data(), out_.device, host.out.size_bytes(), cudaMemcpyDeviceToHost),
          "cudaMemcpy");
  if (lse_.device != nullptr && host.lse.size_bytes() > 0)
    check(cudaMemcpy(host.lse.data(), lse_.device, host.lse.size_bytes(), cudaMemcpyDeviceToHost),
          "cudaMemcpy");
}

#else  // no CUDA: nothing to stage; attention_forward reports the missing backend

DeviceStaging::DeviceStaging(const AttentionBuffers&, AttentionArgs&, const Context&) {}
DeviceStaging::~DeviceStaging() = default;
void DeviceStaging::synchronize() const {}
void DeviceStaging::fetch(AttentionBuffers&) const {}

#endif

}  // namespace tileattn::tools
