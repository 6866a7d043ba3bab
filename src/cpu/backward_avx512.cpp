// The CPU flash backward kernel compiled for one instruction set (flags set in src/CMakeLists.txt).
#define TILEATTN_BACKWARD_GETTER cpu_backward_kernel_avx512
#define TILEATTN_ISA_NAMESPACE bwd_avx512
#include "cpu/backward_kernel.inl"
