#include "build_info.hpp"

#include <nanobind/stl/string.h>

#include "tileattn/tileattn.hpp"

namespace nb = nanobind;

namespace tileattn::python {

void register_build_info(nb::module_& m) {
  m.attr("__version__") = TILEATTN_VERSION;
  m.def("build_report", &build_report,
        "The text `tileattn info` prints: version, compiler, OpenMP, CPU ISA, threads, CUDA.");
  m.def(
      "build_info",
      [] {
        const BuildInfo b = tileattn::build_info();
        nb::dict d;
        d["version"] = b.version;
        d["compiler"] = b.compiler;
        d["openmp"] = b.openmp;
        d["cuda"] = b.cuda;
        d["best_cpu_isa"] = to_string(b.best_cpu_isa);
        d["max_threads"] = b.max_threads;
        return d;
      },
      "tileattn::build_info() as a dict.");
}

}  // namespace tileattn::python
