// tileattn info: what the library was built with and what this machine offers.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "cuda_info.hpp"
#include "tileattn/tileattn.hpp"

namespace tileattn::tools {
namespace {

int info() {
  const BuildInfo b = build_info();
  std::cout << "tileattn " << b.version << '\n'
            << "compiler: " << b.compiler << '\n'
            << "OpenMP: " << (b.openmp ? "yes" : "no") << '\n'
            << "CPU ISA (best detected): " << to_string(b.best_cpu_isa) << '\n'
            << "threads: " << b.max_threads << '\n'
            << "CUDA backend: " << (b.cuda ? "yes" : "no") << '\n';
  print_cuda_devices(std::cout);
  return 0;
}

}  // namespace

Command add_info_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("info", "Version, compiler, OpenMP, CPU ISA, threads, CUDA");
  return {sub, [] { return info(); }};
}

}  // namespace tileattn::tools
