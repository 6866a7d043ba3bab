// exp2_probe.inl for the avx512 level.
#define TILEATTN_ISA_NAMESPACE isa_avx512_exp2_probe
#define EXP2_PROBE exp2_probe_avx512
#include "exp2_probe.inl"
