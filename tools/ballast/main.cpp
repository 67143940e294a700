#include "command.hpp"
#include "support/terminal.hpp"

#include <ballast/version.hpp>

#include <algorithm>
#include <iostream>
#include <map>

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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitBadInput;
  }
  for (auto& [sub, run] : runners) {
    if (sub->parsed()) return run();
  }
  return kExitBadInput;
}
