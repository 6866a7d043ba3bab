// What the library was built with: version, build_info() as a dict, and build_report(), the
// text of `tileattn info` (python -m tileattn info prints it).
#pragma once

#include <nanobind/nanobind.h>

namespace tileattn::python {

void register_build_info(nanobind::module_& m);

}  // namespace tileattn::python
