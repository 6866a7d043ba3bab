// The CPU flash kernel compiled for one instruction set (flags set in src/CMakeLists.txt).
#define TILEATTN_KERNEL_NAME flash_forward_avx2
#include "cpu/flash_kernel.inl"
