// The KV-cache attention kernel for AVX-512 with BF16 dot products (flags set in
// src/CMakeLists.txt): bf16 caches' scores use vdpbf16ps.
#define TILEATTN_DECODE_GETTER cpu_decode_kernel_avx512_bf16
#define TILEATTN_ISA_NAMESPACE decode_avx512_bf16
#include "cpu/decode_kernel.inl"
