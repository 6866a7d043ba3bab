// The KV-cache attention kernel compiled for one instruction set (flags set in src/CMakeLists.txt).
#define TILEATTN_DECODE_GETTER cpu_decode_kernel_avx2
#define TILEATTN_ISA_NAMESPACE decode_avx2
#include "cpu/decode_kernel.inl"
