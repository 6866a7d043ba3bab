// How an entry point picks its backend and runs a host backend (attention.cpp, merge.cpp,
// kvcache.cpp).
#pragma once

#include <new>
#include <string>
#include <system_error>

#include "tileattn/tileattn.hpp"

namespace tileattn::detail {

// The backend a call runs on (automatic: CUDA for device tensors, else the CPU); checks ctx.
inline Backend resolve_backend(const Context& ctx, Device device) {
  if (ctx.threads < 0 || ctx.threads > kMaxThreads)
    throw Error("tileattn: argument 'ctx.threads': must be in [0, " + std::to_string(kMaxThreads) +
                "] (0 = default), got " + std::to_string(ctx.threads));
  if (static_cast<unsigned>(ctx.backend) > static_cast<unsigned>(Backend::cuda))
    throw Error("tileattn: argument 'ctx.backend': value " +
                std::to_string(static_cast<unsigned>(ctx.backend)) + " is not a tileattn::Backend");
  if (static_cast<unsigned>(ctx.cpu_isa) > static_cast<unsigned>(CpuIsa::portable) &&
      ctx.cpu_isa != CpuIsa::best)
    throw Error("tileattn: argument 'ctx.cpu_isa': value " +
                std::to_string(static_cast<unsigned>(ctx.cpu_isa)) + " is not a tileattn::CpuIsa");
  if (ctx.backend != Backend::automatic) return ctx.backend;
  return device == Device::cuda ? Backend::cuda : Backend::cpu;
}

// The placement checks of a resolved backend: the cuda backend takes device tensors, the host
// backends host tensors; a build without CUDA refuses the cuda backend.
inline void require_device_tensors(Device device) {
  if (device != Device::cuda)
    throw Error("tileattn: argument 'ctx.backend': the cuda backend needs device tensors");
}
inline void require_host_tensors(Backend backend, Device device) {
  if (device != Device::cpu)
    throw Error(std::string("tileattn: argument 'ctx.backend': the ") + to_string(backend) +
                " backend needs host tensors");
}
[[noreturn]] inline void no_cuda_backend() {
  throw Error(
      "tileattn: argument 'ctx.backend': this build has no CUDA backend "
      "(configure with -DTILEATTN_CUDA=ON)");
}

// Runs a host backend, turning a failure to get memory or threads into tileattn::Error.
template <typename F>
inline void run_on_host(F&& f) {
  try {
    f();
  } catch (const std::bad_alloc&) {
    throw Error("tileattn: out of host memory for the call's buffers");
  } catch (const std::system_error& e) {
    throw Error(std::string("tileattn: the CPU backend could not start its threads: ") + e.what());
  }
}

}  // namespace tileattn::detail
