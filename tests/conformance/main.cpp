// ballast-conformance --backend <config> [--json] [doctest options]
//
// Installed with the package (bin/ballast-conformance, also run by
// `ballast conformance`) so users can run it on their own hardware. It ends
// with a summary to paste into a bug report (summary.hpp); with --json that
// summary is the only thing on stdout and doctest's own output goes to stderr.
//
// One binary for every backend: it opens the backend named by --backend
// (default cpu) and runs every conformance test against it. A backend that
// is not there on this machine (plugin not built/installed, no driver, no
// device) prints `skipped: <reason>` and exits 77, which ctest reports as
// a skip; every other failure to open is a failure.
#define DOCTEST_CONFIG_IMPLEMENT
#include "conformance/conformance.hpp"
#include "conformance/summary.hpp"

#include <ballast/backend_registry.hpp>

#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace conformance {
namespace {
std::unique_ptr<ballast::GpuBackend> g_backend;
std::string g_config = "cpu";
}  // namespace

ballast::GpuBackend& gpu() { return *g_backend; }
const std::string& backend_config() { return g_config; }

}  // namespace conformance

namespace {

constexpr int kExitSkip = 77;
constexpr int kExitUsage = 2;

// Whether an open failure means "this backend is not on this machine":
// the plugin was not found, or it reports no driver/device. A device that
// was asked for by index or UUID and does not exist is a failure.
bool backend_absent(const ballast::Error& e, const std::string& name) {
  if (e.code == ballast::ErrorCode::unavailable) return true;
  if (e.code != ballast::ErrorCode::not_found) return false;
  for (const auto& listing : ballast::list_backends()) {
    if (listing.name == name) return listing.state == ballast::BackendListing::State::not_found;
  }
  return false;
}

// Pulls `--backend X` / `--backend=X` and `--json` out of argv; the rest
// goes to doctest.
bool take_own_args(int argc, char** argv, std::string& config, bool& json, std::vector<char*>& rest) {
  rest.push_back(argv[0]);
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--json") {
      json = true;
    } else if (arg == "--backend") {
      if (i + 1 >= argc) return false;
      config = argv[++i];
    } else if (arg.substr(0, 10) == "--backend=") {
      config = std::string(arg.substr(10));
    } else {
      rest.push_back(argv[i]);
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> doctest_args;
  bool json = false;
  if (!take_own_args(argc, argv, conformance::g_config, json, doctest_args)) {
    std::fprintf(stderr, "usage: ballast-conformance --backend <name[:device][?key=value...]> [--json] [doctest options]\n");
    return kExitUsage;
  }
  const std::string& config = conformance::g_config;
  conformance::RunSummary summary;
  summary.config = config;
  // With --json, stdout carries the summary alone.
  std::FILE* const chatter = json ? stderr : stdout;

  auto opened = ballast::open_backend(config);
  if (!opened.ok()) {
    const auto parsed = ballast::parse_backend_config(config);
    if (parsed.ok() && backend_absent(opened.error(), parsed->name)) {
      std::fprintf(chatter, "skipped: %s\n", opened.error().to_string().c_str());
      summary.skipped = opened.error().to_string();
      summary.exit_code = kExitSkip;
      if (json) conformance::print_summary(summary, json, stdout);
      return kExitSkip;
    }
    std::fprintf(stderr, "ballast-conformance: cannot open backend: %s\n", opened.error().to_string().c_str());
    summary.open_error = opened.error().to_string();
    // A config string that does not parse or names no backend is a usage
    // error (2, as every ballast command); a backend that is there but
    // fails to open is a failed run (1).
    summary.exit_code = opened.code() == ballast::ErrorCode::invalid_argument ? kExitUsage : 1;
    conformance::print_summary(summary, json, stdout);
    return summary.exit_code;
  }
  conformance::g_backend = std::move(*opened);
  // A backend that cannot allocate at all (the skeleton template) fails
  // every case the same way: one skip with its reason says so once.
  if (auto probe = conformance::gpu().allocate(1); !probe.ok()) {
    if (probe.code() == ballast::ErrorCode::unsupported) {
      std::fprintf(chatter, "skipped: every case needs an allocation: %s\n", probe.error().to_string().c_str());
      summary.skipped = probe.error().to_string();
      summary.exit_code = kExitSkip;
      if (json) conformance::print_summary(summary, json, stdout);
      conformance::g_backend.reset();
      return kExitSkip;
    }
  } else if (ballast::Status freed = conformance::gpu().free(*probe); !freed.ok()) {
    // Still a run that opened its backend: it ends with the summary (the
    // only thing on stdout with --json), and the backend goes now, while
    // the plugin is intact, not in the static destructors at exit.
    const std::string why = "freeing a 1-byte allocation failed: " + freed.to_string();
    std::fprintf(stderr, "ballast-conformance: %s\n", why.c_str());
    summary.device = conformance::gpu().info();
    summary.open_error = why;
    summary.exit_code = 1;
    conformance::g_backend.reset();
    conformance::print_summary(summary, json, stdout);
    return 1;
  }
  const auto& info = conformance::gpu().info();
  summary.device = info;
  std::fprintf(chatter, "ballast-conformance: backend \"%s\": %s device %d: %s (%s)\n", config.c_str(),
               info.backend.c_str(), info.index, info.name.c_str(), info.uuid.c_str());
  std::fflush(chatter);

  const auto before = conformance::gpu().counters();
  doctest::Context context;
  context.applyCommandLine(static_cast<int>(doctest_args.size()), doctest_args.data());
  if (json) context.setCout(&std::cerr);
  int result = context.run();
  if (context.shouldExit()) {
    conformance::g_backend.reset();
    return result;
  }
  const auto after = conformance::gpu().counters();
  if (after.live_allocations != before.live_allocations || after.live_registrations != before.live_registrations) {
    summary.leaks = "the run leaked " + std::to_string(after.live_allocations - before.live_allocations) +
                    " allocations and " + std::to_string(after.live_registrations - before.live_registrations) +
                    " registrations";
    std::fprintf(stderr, "ballast-conformance: %s\n", summary.leaks.c_str());
    result = 1;
  }
  summary.exit_code = result;
  conformance::print_summary(summary, json, stdout);
  conformance::g_backend.reset();
  return result;
}
