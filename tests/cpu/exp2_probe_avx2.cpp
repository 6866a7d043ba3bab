// exp2_probe.inl for the avx2 level.
#define TILEATTN_ISA_NAMESPACE isa_avx2_exp2_probe
#define EXP2_PROBE exp2_probe_avx2
#include "exp2_probe.inl"
