// Each subcommand of the `ballast` tool lives in its own cmd_<name>.cpp and
// registers itself here, so adding a command never edits main.cpp.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace ballast::cli {

// Exit codes shared by every command.
inline constexpr int kExitOk = 0;
inline constexpr int kExitVerifyFailed = 1;  // the input was read and found wrong
inline constexpr int kExitBadInput = 2;      // bad input or usage

struct Command {
  std::string name;
  std::string summary;
  // Adds the command's options to `sub`; returns the function that runs it.
  std::function<std::function<int()>(CLI::App& sub)> setup;
};

std::vector<Command>& commands();

struct RegisterCommand {
  explicit RegisterCommand(Command c) { commands().push_back(std::move(c)); }
};

}  // namespace ballast::cli
