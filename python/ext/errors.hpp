// tileattn.Error: the Python face of tileattn::Error, a subclass of ValueError carrying the
// library's message (which names the argument).
#pragma once

#include <nanobind/nanobind.h>

namespace tileattn::python {

void register_errors(nanobind::module_& m);

}  // namespace tileattn::python
