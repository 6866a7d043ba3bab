// The CPU flash kernel compiled for one instruction set (flags set in src/CMakeLists.txt).
#define TILEATTN_KERNEL_GETTER cpu_tile_kernel_avx2
#define TILEATTN_ISA_NAMESPACE isa_avx2
#include "cpu/flash_kernel.inl"
