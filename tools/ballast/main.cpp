#include "command.hpp"
#include "support/terminal.hpp"

#include <ballast/version.hpp>

#include <algorithm>
#include <iostream>
#include <map>
#include <string>

namespace ballast::cli {
std::vector<Command>& commands() {
  static std::vector<Command> all;
  return all;
}
}  // namespace ballast::cli

int main(int argc, char** argv) {
  using namespace ballast::cli;
  // Before anything is printed: no output of any command reaches the
  // terminal unescaped (support/terminal.hpp).
  const TerminalGuard terminal;
  CLI::App app{"ballast: zero-copy model weights and their device encodings, on every GPU vendor"};
  app.set_version_flag("--version", std::string("ballast ") + BALLAST_VERSION_STRING);
  app.require_subcommand(1);

  auto& all = commands();
  std::sort(all.begin(), all.end(), [](const Command& a, const Command& b) { return a.name < b.name; });
  std::map<CLI::App*, std::function<int()>> runners;
  for (auto& c : all) {
    CLI::App* sub = app.add_subcommand(c.name, c.summary);
    runners[sub] = c.setup(*sub);
  }
  // `ballast bogus`: CLI11 would say a subcommand is required; name it instead.
  if (argc > 1 && argv[1][0] != '-' &&
      std::none_of(all.begin(), all.end(), [&](const Command& c) { return c.name == argv[1]; })) {
    std::string names;
    for (const Command& c : all) names += (names.empty() ? "" : ", ") + c.name;
    std::cerr << "ballast: invalid_argument: unknown command '" << argv[1] << "' (commands: " << names << ")\n";
    return kExitBadInput;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e), kExitOk;  // --help, --version: printed, success
    // A usage error is one line in the format of every other error
    // (docs/tools.md): the command, the code, what is wrong.
    std::string command = "ballast";
    for (const CLI::App* sub : app.get_subcommands()) command += " " + sub->get_name();
    std::cerr << command << ": invalid_argument: " << e.what() << " (" << command << " --help lists the options)\n";
    return kExitBadInput;
  }
  for (auto& [sub, run] : runners) {
    if (sub->parsed()) return run();
  }
  return kExitBadInput;
}
