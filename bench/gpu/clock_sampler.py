"""NVML clock sampling for bench_torch.py (the Python twin of clock_sampler.hpp): the mean and
minimum SM clock, the peak power and the clock-event (throttle) reasons while a shape runs."""
import ctypes
import threading
import time


class ClockSampler:
    def __init__(self, uuid):
        self.device = None
        try:
            self.nvml = ctypes.CDLL("libnvidia-ml.so.1")
            handle = ctypes.c_void_p()
            if self.nvml.nvmlInit_v2() == 0 and self.nvml.nvmlDeviceGetHandleByUUID(
                    uuid.encode(), ctypes.byref(handle)) == 0:
                self.device = handle
        except OSError:
            pass
        self.thread, self.samples, self.running = None, [], False

    def start(self):
        self.samples, self.running = [], True
        if self.device is None:
            return
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        mhz, mw, reasons = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_ulonglong()
        while self.running:
            if (self.nvml.nvmlDeviceGetClockInfo(self.device, 1, ctypes.byref(mhz)) == 0 and
                    self.nvml.nvmlDeviceGetPowerUsage(self.device, ctypes.byref(mw)) == 0 and
                    self.nvml.nvmlDeviceGetCurrentClocksThrottleReasons(self.device, ctypes.byref(reasons)) == 0):
                self.samples.append((mhz.value, mw.value / 1000.0, reasons.value & ~1))
            time.sleep(0.001)

    def stop(self):
        """Stops sampling; returns a dict for the benchmark record (empty without NVML)."""
        self.running = False
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        if not self.samples:
            return {}
        mask = 0
        for s in self.samples:
            mask |= s[2]
        return {"sm_mhz": sum(s[0] for s in self.samples) / len(self.samples),
                "sm_mhz_min": min(s[0] for s in self.samples),
                "power_w": max(s[1] for s in self.samples), "throttle": mask,
                "clock_samples": len(self.samples)}
