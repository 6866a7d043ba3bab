// OpenBLAS picks its kernels when the library loads. Debian 12's OpenBLAS 0.3.21 does not know
// newer Intel CPUs (e.g. Emerald Rapids, family 6 model 0xCF) and falls back to its generic
// "Prescott" SSE3 kernels, ~7x slower than its AVX-512 ones; the only remedy is the
// OPENBLAS_CORETYPE environment variable, read at load time.
#pragma once

namespace tileattn::bench {

// The kernel set OpenBLAS chose ("SkylakeX", "Haswell", "Prescott", ...).
const char* openblas_core() noexcept;

// When OpenBLAS fell back to "Prescott" on a CPU with AVX-512 (or AVX2+FMA) and
// OPENBLAS_CORETYPE is unset, re-executes this program with OPENBLAS_CORETYPE=SkylakeX (or
// Haswell), saying so on stderr. Returns normally when nothing needs doing or exec fails.
void reexec_with_openblas_core_if_needed(char** argv) noexcept;

}  // namespace tileattn::bench
