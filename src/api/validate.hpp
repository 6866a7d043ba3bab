// The one place where arguments are checked. Everything a kernel relies on is established here.
#pragma once

#include "common/params.hpp"

namespace tileattn::detail {

// Checks every argument of attention_forward and builds the kernel parameters.
// Throws tileattn::Error naming the offending argument; never touches the outputs.
AttnParams validate_forward(const AttentionArgs& args);

// The same for attention_backward: every forward check (lse required), then dout, dq, dk, dv.
AttnBackwardParams validate_backward(const AttentionBackwardArgs& args);

}  // namespace tileattn::detail
