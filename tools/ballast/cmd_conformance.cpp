// `ballast conformance --backend NAME [--json] [-- doctest options]`: runs
// the conformance suite on this machine's device. The suite is its own
// program (ballast-conformance, installed next to `ballast`); this command
// finds it there and hands over, so the output and exit code are the
// suite's own: 0 passed, 1 failed, 2 a bad config string, 77 the backend
// is not on this machine.
#include "command.hpp"
#include "command_context.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <system_error>
#include <unistd.h>
#include <vector>

namespace ballast::cli {
namespace {

// The runner next to this executable: bin/ in an install (moved or not)
// and in a build tree alike.
std::filesystem::path runner_path() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "ballast-conformance";
  return self.parent_path() / "ballast-conformance";
}

struct Options {
  std::string backend;
  bool json = false;
  std::vector<std::string> extra;
};

int run(const Options& o) {
  CommandContext ctx("conformance");
  const std::string runner = runner_path().string();
  std::error_code ec;
  if (!std::filesystem::exists(runner, ec))
    return ctx.fail(ErrorCode::not_found,
                    "the conformance runner is not installed: " + runner +
                        " does not exist (it is built and installed with BALLAST_BUILD_TESTS=ON)");
  std::vector<std::string> args = {runner, "--backend", o.backend};
  if (o.json) args.emplace_back("--json");
  args.insert(args.end(), o.extra.begin(), o.extra.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::cout.flush();
  std::fflush(nullptr);
  ::execv(runner.c_str(), argv.data());
  const int err = errno;  // before anything below can change it
  return ctx.fail(ErrorCode::io, "cannot run " + runner + ": " + std::strerror(err));
}

const RegisterCommand kConformance{{
    "conformance",
    "Run the conformance suite on a backend of this machine and print a summary for bug reports",
    [](CLI::App& sub) -> std::function<int()> {
      auto o = std::make_shared<Options>();
      sub.add_option("--backend", o->backend, "backend config string, e.g. cpu, vulkan:0, cuda:1")->required();
      sub.add_flag("--json", o->json, "print the summary as JSON (the suite's own output goes to stderr)");
      sub.add_option("doctest", o->extra, "options for the suite after --, e.g. -- -tc='device weights*'");
      return [o] { return run(*o); };
    },
}};

}  // namespace
}  // namespace ballast::cli
