#include "errors.hpp"

#include "tileattn/tileattn.hpp"

namespace tileattn::python {

void register_errors(nanobind::module_& m) {
  nanobind::exception<Error>(m, "Error", PyExc_ValueError);
}

}  // namespace tileattn::python
