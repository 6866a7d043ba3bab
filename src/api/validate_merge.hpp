// Argument checks of merge_attention_states.
#pragma once

#include <span>

#include "common/merge_params.hpp"

namespace tileattn::detail {

// Throws tileattn::Error naming the offending argument; never touches out or lse.
MergeParams validate_merge(std::span<const Tensor> outs, std::span<const Tensor> lses,
                           const Tensor& out, const Tensor& lse);

}  // namespace tileattn::detail
