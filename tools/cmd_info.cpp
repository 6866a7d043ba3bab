// tileattn info: what the library was built with and what this machine offers. The text is the
// library's build_report(), which `python -m tileattn info` prints too.
#include <CLI/CLI.hpp>
#include <iostream>

#include "commands.hpp"
#include "tileattn/tileattn.hpp"

namespace tileattn::tools {
namespace {

int info() {
  std::cout << build_report();
  return 0;
}

}  // namespace

Command add_info_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("info", "Version, compiler, OpenMP, CPU ISA, threads, CUDA");
  return {sub, [] { return info(); }};
}

}  // namespace tileattn::tools
