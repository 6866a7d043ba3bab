// exp2_probe.inl for the portable level.
#define TILEATTN_ISA_NAMESPACE isa_portable_exp2_probe
#define EXP2_PROBE exp2_probe_portable
#include "exp2_probe.inl"
