// Run-time instruction-set detection: CPUID feature bits plus XGETBV to confirm the OS saves
// the wide register state.
#include <cstdint>

#include "cpu/flash_forward.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace tileattn::detail {
namespace {

// Linux hands out the AMX tile-data state only on request (arch_prctl ARCH_REQ_XCOMP_PERM).
bool request_amx_permission() noexcept {
#if defined(__linux__) && defined(__x86_64__)
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  static const bool granted = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  return granted;
#else
  return false;
#endif
}

}  // namespace

namespace {

CpuIsa detect_cpu_isa_uncached() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return CpuIsa::portable;
  const bool osxsave = (ecx >> 27) & 1u, fma = (ecx >> 12) & 1u, f16c = (ecx >> 29) & 1u;
  if (!osxsave) return CpuIsa::portable;
  std::uint32_t xcr0_lo = 0, xcr0_hi = 0;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const bool os_avx = (xcr0_lo & 0x6u) == 0x6u;                 // XMM + YMM state
  const bool os_avx512 = os_avx && (xcr0_lo & 0xe0u) == 0xe0u;  // opmask + ZMM state
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return CpuIsa::portable;
  const bool avx2 = (ebx >> 5) & 1u;
  const bool avx512f = (ebx >> 16) & 1u, avx512dq = (ebx >> 17) & 1u, avx512bw = (ebx >> 30) & 1u,
             avx512vl = (ebx >> 31) & 1u;
  unsigned eax1 = 0, ebx1 = 0, ecx1 = 0, edx1 = 0;
  __get_cpuid_count(7, 1, &eax1, &ebx1, &ecx1, &edx1);
  const bool avx512_bf16 = (eax1 >> 5) & 1u;
  const bool has_avx512 = os_avx512 && avx512f && avx512dq && avx512bw && avx512vl && fma && f16c;
  const bool amx_bf16 = (edx >> 22) & 1u, amx_tile = (edx >> 24) & 1u;
  const bool os_amx = (xcr0_lo & 0x60000u) == 0x60000u;  // XTILECFG + XTILEDATA
  if (has_avx512 && avx512_bf16 && amx_bf16 && amx_tile && os_amx && request_amx_permission())
    return CpuIsa::amx_bf16;
  if (has_avx512 && avx512_bf16) return CpuIsa::avx512_bf16;
  if (has_avx512) return CpuIsa::avx512;
  if (os_avx && avx2 && fma && f16c) return CpuIsa::avx2;
#endif
  return CpuIsa::portable;
}

}  // namespace

// Detected once per process: under a hypervisor every CPUID traps (microseconds each), which
// was a sixth of a small call's time (B 1, H 8, L 64, D 64).
CpuIsa detect_cpu_isa() noexcept {
  static const CpuIsa isa = detect_cpu_isa_uncached();
  return isa;
}

int f32_kernel_lanes(CpuIsa isa) noexcept {
  return isa == CpuIsa::amx_bf16 || isa == CpuIsa::avx512_bf16 || isa == CpuIsa::avx512 ? 16 : 8;
}

CpuIsa select_cpu_isa(CpuIsa cap) noexcept {
  const CpuIsa best = detect_cpu_isa();
  if (cap == CpuIsa::best) return best;
  // Enumerators are ordered best first: a larger value is a lower level.
  return static_cast<std::uint8_t>(cap) > static_cast<std::uint8_t>(best) ? cap : best;
}

}  // namespace tileattn::detail
