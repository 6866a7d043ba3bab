// tileattn: the command-line tool. Errors are reported as one line on stderr with a non-zero
// exit status; see docs/cli.md.
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <vector>

#include "commands.hpp"
#include "options.hpp"

int main(int argc, char** argv) {
  using namespace tileattn::tools;
  // One handler for every failure, setting up the command table included (it allocates).
  try {
    CLI::App app{"tileattn: attention operators (flash attention on CPU and CUDA)", "tileattn"};
    app.require_subcommand(1);
    app.set_version_flag("--version", tileattn::build_info().version);
    const std::vector<Command> commands = {add_run_command(app), add_bench_command(app),
                                           add_verify_command(app), add_info_command(app),
                                           add_demo_command(app)};

    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
      return app.exit(e);
    } catch (const CLI::ParseError& e) {
      std::cerr << "tileattn: error: " << one_line(e.what()) << " (see tileattn --help)\n";
      return e.get_exit_code() != 0 ? e.get_exit_code() : 2;
    }

    for (const Command& command : commands)
      if (command.subcommand->parsed()) return command.run();
  } catch (const std::exception& e) {
    std::cerr << "tileattn: error: " << one_line(e.what()) << '\n';
    return 1;
  }
  return 2;
}
