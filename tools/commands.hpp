// The tileattn tool's subcommands. Each add_*_command registers a CLI11 subcommand with its
// options and returns it with the action to run when it was given (returns the exit status).
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace tileattn::tools {

struct Command {
  CLI::App* subcommand = nullptr;
  std::function<int()> run;
};

Command add_run_command(CLI::App& app);     // cmd_run.cpp: attention on .npy files
Command add_bench_command(CLI::App& app);   // cmd_bench.cpp: GFLOP/s of forward and backward
Command add_verify_command(CLI::App& app);  // cmd_verify.cpp: a backend vs the reference
Command add_info_command(CLI::App& app);    // cmd_info.cpp: build and machine information
Command add_demo_command(CLI::App& app);    // cmd_demo.cpp: a guided tour on one shape

}  // namespace tileattn::tools
