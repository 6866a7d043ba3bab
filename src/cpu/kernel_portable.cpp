// The CPU flash kernel compiled for one instruction set (flags set in src/CMakeLists.txt).
#define TILEATTN_KERNEL_GETTER cpu_tile_kernel_portable
#define TILEATTN_ISA_NAMESPACE isa_portable
#include "cpu/flash_kernel.inl"
