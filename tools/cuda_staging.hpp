// Device staging for --backend cuda: the tool's buffers live on the host (AttentionBuffers); this
// copies every present tensor to device memory, points AttentionArgs at the device copies, and
// copies out (and lse) back; for the backward also dout, dq, dk, dv. The KV-cache calls
// (bench --decode, demo --decode) stage their tensors one by one (device_view, fetch). Inactive
// (a no-op) for the host backends and in builds without CUDA, where the library itself reports
// that the cuda backend is missing.
#pragma once

#include <utility>
#include <vector>

#include "options.hpp"
#include "tensor_io.hpp"
#include "tileattn/tileattn.hpp"

namespace tileattn::tools {

class DeviceStaging {
 public:
  // Stages `host` when ctx.backend is Backend::cuda and rebinds `args` (already bound to `host`)
  // to the device copies, on device 0. Throws ToolError with CUDA's message on failure.
  // upload_outputs: out and lse are copied up too (inputs of a backward call).
  DeviceStaging(const AttentionBuffers& host, AttentionArgs& args, const Context& ctx,
                bool upload_outputs = false);
  // Nothing staged yet: for calls other than attention_forward, whose tensors are staged one by
  // one with device_view.
  explicit DeviceStaging(const Context& ctx);
  ~DeviceStaging();
  DeviceStaging(const DeviceStaging&) = delete;
  DeviceStaging& operator=(const DeviceStaging&) = delete;

  bool active() const noexcept { return active_; }
  // Waits for the work queued on the context's stream (timing loops call it after each run).
  void synchronize() const;
  // Synchronises, then copies out and lse from the device into `host`.
  void fetch(AttentionBuffers& host) const;
  // The backward's tensors: uploads dout, allocates dq, dk, dv and rebinds `args` to them.
  void stage_gradients(const Problem::BackwardBuffers& host, AttentionBackwardArgs& args);
  // Synchronises, then copies dq, dk, dv into `host`.
  void fetch_gradients(Problem::BackwardBuffers& host) const;

  // The view of `host` that a call on the context's backend takes. Active: a device copy of it,
  // allocated on the first call for this HostTensor and reused by later ones, which copy the
  // host data up again (upload = false: allocated only, for outputs). Inactive: host.view(name).
  Tensor device_view(const HostTensor& host, const char* name, bool upload = true);
  // Synchronises, then copies the device copy of `host` (made by device_view) into it.
  void fetch(HostTensor& host) const;

 private:
  struct Copy {
    void* device = nullptr;
    std::size_t bytes = 0;
  };
  bool active_ = false;
  void* stream_ = nullptr;
  std::vector<Copy> copies_;  // every allocation, freed by the destructor
  Copy out_, lse_, dq_, dk_, dv_;
  std::vector<std::pair<const HostTensor*, Copy>> by_host_;  // device_view's copies
  Copy stage(const HostTensor& t, Tensor& view, bool upload);
  void download(const Copy& c, HostTensor& t) const;
};

}  // namespace tileattn::tools
