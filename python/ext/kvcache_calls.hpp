// The extension's serving calls: attention_with_kvcache (the cache appended in place) and
// apply_rotary, over DLPack arrays whose outputs the caller has allocated (the Python layer
// allocates them when the user does not).
#pragma once

#include <nanobind/nanobind.h>

namespace tileattn::python {

void register_kvcache_calls(nanobind::module_& m);

}  // namespace tileattn::python
