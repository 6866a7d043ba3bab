// The KV-cache attention kernel compiled for one instruction set (flags set in src/CMakeLists.txt).
#define TILEATTN_DECODE_GETTER cpu_decode_kernel_portable
#define TILEATTN_ISA_NAMESPACE decode_portable
#include "cpu/decode_kernel.inl"
