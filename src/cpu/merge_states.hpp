// merge_attention_states on the host.
#pragma once

#include "common/merge_params.hpp"

namespace tileattn::detail {

void cpu_merge_states(const MergeParams& p, int threads);

}  // namespace tileattn::detail
