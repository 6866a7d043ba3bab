// placeholder: scalar path until the SIMD kernel lands
#include "cpu/kernels.hpp"
#include "reference/reference_forward.hpp"
namespace tileattn::detail {
void TILEATTN_KERNEL_NAME(const AttnParams& p, int threads) { reference_forward(p, threads); }
}
