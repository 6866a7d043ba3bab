// Samples the GPU's SM clock, power and clock-event (throttle) reasons through NVML while a
// benchmark shape runs, so that every figure carries the clocks it ran at. NVML is opened with
// dlopen (libnvidia-ml.so.1 ships with the driver): the benchmark builds without it and reports
// no clocks where it is missing.
#pragma once

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

namespace tileattn_bench {

struct ClockStats {
  int samples = 0;
  double mean_mhz = 0, min_mhz = 0, max_power_w = 0;
  unsigned long long reasons = 0;  // OR of the NVML clock-event reason bits seen
};

class ClockSampler {
 public:
  explicit ClockSampler(int cuda_device) {
    library_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library_ == nullptr) return;
    const auto init = reinterpret_cast<int (*)()>(dlsym(library_, "nvmlInit_v2"));
    const auto by_bus = reinterpret_cast<int (*)(const char*, void**)>(
        dlsym(library_, "nvmlDeviceGetHandleByPciBusId_v2"));
    clock_ =
        reinterpret_cast<int (*)(void*, int, unsigned*)>(dlsym(library_, "nvmlDeviceGetClockInfo"));
    power_ =
        reinterpret_cast<int (*)(void*, unsigned*)>(dlsym(library_, "nvmlDeviceGetPowerUsage"));
    reasons_ = reinterpret_cast<int (*)(void*, unsigned long long*)>(
        dlsym(library_, "nvmlDeviceGetCurrentClocksThrottleReasons"));
    limit_ = reinterpret_cast<int (*)(void*, unsigned*)>(
        dlsym(library_, "nvmlDeviceGetEnforcedPowerLimit"));
    char bus[32] = {};
    if (init == nullptr || by_bus == nullptr || clock_ == nullptr || power_ == nullptr ||
        reasons_ == nullptr || init() != 0 ||
        cudaDeviceGetPCIBusId(bus, sizeof bus, cuda_device) != cudaSuccess ||
        by_bus(bus, &device_) != 0)
      device_ = nullptr;
  }
  ~ClockSampler() {
    stop();
    if (library_ != nullptr) dlclose(library_);
  }
  ClockSampler(const ClockSampler&) = delete;
  ClockSampler& operator=(const ClockSampler&) = delete;

  bool available() const { return device_ != nullptr; }
  double power_limit_w() const {
    unsigned mw = 0;
    return device_ != nullptr && limit_ != nullptr && limit_(device_, &mw) == 0 ? mw / 1000.0 : 0.0;
  }

  // Starts sampling (every millisecond) in a background thread.
  void start() {
    stop();
    stats_ = {};
    sum_mhz_ = 0;
    if (device_ == nullptr) return;
    running_ = true;
    thread_ = std::thread([this] {
      while (running_.load()) {
        unsigned mhz = 0, mw = 0;
        unsigned long long reasons = 0;
        if (clock_(device_, 1 /* NVML_CLOCK_SM */, &mhz) == 0 && power_(device_, &mw) == 0 &&
            reasons_(device_, &reasons) == 0) {
          stats_.min_mhz = stats_.samples == 0 ? mhz : std::min<double>(stats_.min_mhz, mhz);
          stats_.max_power_w = std::max(stats_.max_power_w, mw / 1000.0);
          stats_.reasons |= reasons & ~1ull;  // bit 0: idle
          sum_mhz_ += mhz;
          ++stats_.samples;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }
  ClockStats stop() {
    if (thread_.joinable()) {
      running_ = false;
      thread_.join();
      if (stats_.samples > 0) stats_.mean_mhz = sum_mhz_ / stats_.samples;
    }
    return stats_;
  }

 private:
  void* library_ = nullptr;
  void* device_ = nullptr;
  int (*clock_)(void*, int, unsigned*) = nullptr;
  int (*power_)(void*, unsigned*) = nullptr;
  int (*reasons_)(void*, unsigned long long*) = nullptr;
  int (*limit_)(void*, unsigned*) = nullptr;
  std::thread thread_;
  std::atomic<bool> running_{false};
  ClockStats stats_;
  double sum_mhz_ = 0;
};

}  // namespace tileattn_bench
