// tileattn._tileattn: the compiled half of the Python package. Each register_* function lives in
// its own file; the Python package (python/tileattn) builds the public API on top.
#include <nanobind/nanobind.h>

#include "attention_calls.hpp"
#include "build_info.hpp"
#include "errors.hpp"
#include "kvcache_calls.hpp"

NB_MODULE(_tileattn, m) {
  m.doc() = "tileattn's compiled core; use the tileattn package's functions instead.";
  tileattn::python::register_errors(m);
  tileattn::python::register_build_info(m);
  tileattn::python::register_attention_calls(m);
  tileattn::python::register_kvcache_calls(m);
}
