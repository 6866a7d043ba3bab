// The extension's attention functions: forward and backward over DLPack arrays whose outputs
// the caller has allocated (the Python layer allocates them when the user does not).
#pragma once

#include <nanobind/nanobind.h>

namespace tileattn::python {

void register_attention_calls(nanobind::module_& m);

}  // namespace tileattn::python
