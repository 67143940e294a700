// ballast_run_conformance()'s answers when the runner misbehaves: exits
// with no summary, prints one that is not JSON, dies of a signal, is
// missing, cannot be run. The runner is found beside the library
// (<prefix>/lib/../bin/ballast-conformance), so a copy of libballast in a
// scratch prefix runs a scripted runner there. This program does not link
// libballast: the copy is the only one in the process, so its own lookups
// (dladdr of its entry point) find the copy's path.
#include "unit/store/scratch_dir.hpp"

#include <ballast/ballast.h>

#include <doctest/doctest.h>

#include <dlfcn.h>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using ballast::testing::ScratchDir;

// The runner: what it does is chosen by the backend config it is given
// ($2, after --backend).
constexpr const char* kScript = R"(#!/bin/sh
case "$2" in
  silent-fail) exit 3 ;;
  silent-ok) exit 0 ;;
  counts) printf '{"passed": 5, "failed": 1, "skipped": 2}'; exit 1 ;;
  not-json) printf 'not a summary'; exit 0 ;;
  signal) kill -9 $$ ;;
esac
exit 9
)";

struct Library {
  void* handle = nullptr;
  decltype(&ballast_run_conformance) run = nullptr;
  decltype(&ballast_status_code) code = nullptr;
  decltype(&ballast_status_message) message = nullptr;
  decltype(&ballast_status_free) free = nullptr;
  // Never dlclose()d: the library's process-lifetime objects (its backend
  // registry, its log sink) stay allocated until exit, as in an engine
  // that keeps libballast loaded.
};

struct Answer {
  ballast_code code = BALLAST_OK;
  std::string message, json;
  ballast_conformance_result result{};
};

Answer run(const Library& lib, const char* config) {
  Answer a;
  a.result.size = sizeof a.result;
  std::vector<char> json(4096, 'x');
  ballast_status* st = lib.run(config, nullptr, &a.result, json.data(), json.size(), nullptr);
  a.code = lib.code(st);
  a.message = st != nullptr ? lib.message(st) : "";
  lib.free(st);
  if (a.code == BALLAST_OK) a.json = json.data();
  return a;
}

}  // namespace

TEST_CASE("the C API's conformance call when its runner exits silently, dies, is missing or cannot run") {
  ScratchDir prefix("capi-runner");
  const fs::path lib_dir = prefix.path() / "lib", bin_dir = prefix.path() / "bin";
  fs::create_directories(lib_dir);
  fs::create_directories(bin_dir);
  const fs::path lib_path = lib_dir / "libballast.so";
  fs::copy_file(fs::canonical(BALLAST_BINARY_DIR "/lib/libballast.so"), lib_path);
  const fs::path runner = bin_dir / "ballast-conformance";
  std::ofstream(runner) << kScript;
  fs::permissions(runner, fs::perms::owner_all);

  Library lib;
  lib.handle = dlopen(lib_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  REQUIRE_MESSAGE(lib.handle != nullptr, dlerror());
  lib.run = reinterpret_cast<decltype(lib.run)>(dlsym(lib.handle, "ballast_run_conformance"));
  lib.code = reinterpret_cast<decltype(lib.code)>(dlsym(lib.handle, "ballast_status_code"));
  lib.message = reinterpret_cast<decltype(lib.message)>(dlsym(lib.handle, "ballast_status_message"));
  lib.free = reinterpret_cast<decltype(lib.free)>(dlsym(lib.handle, "ballast_status_free"));
  REQUIRE((lib.run && lib.code && lib.message && lib.free));

  {  // a failure with no summary: the runner refused its arguments
    const Answer a = run(lib, "silent-fail");
    CHECK(a.code == BALLAST_E_INVALID_ARGUMENT);
    CHECK(a.message ==
          "invalid_argument: the conformance runner refused backend 'silent-fail' (exit code 3; its message is on "
          "stderr)");
  }
  {  // success with no summary: no counts, an empty summary
    const Answer a = run(lib, "silent-ok");
    REQUIRE(a.code == BALLAST_OK);
    CHECK(a.result.exit_code == 0);
    CHECK(a.result.passed + a.result.failed + a.result.skipped == 0);
    CHECK(a.json.empty());
  }
  {  // a summary's counts, and the exit code beside them
    const Answer a = run(lib, "counts");
    REQUIRE(a.code == BALLAST_OK);
    CHECK(a.result.exit_code == 1);
    CHECK(a.result.passed == 5);
    CHECK(a.result.failed == 1);
    CHECK(a.result.skipped == 2);
    CHECK(a.json == R"({"passed": 5, "failed": 1, "skipped": 2})");
  }
  {  // a summary that is not JSON, on success: handed back as it is, no counts
    const Answer a = run(lib, "not-json");
    REQUIRE(a.code == BALLAST_OK);
    CHECK(a.result.passed + a.result.failed + a.result.skipped == 0);
    CHECK(a.json == "not a summary");
  }
  {  // a runner that dies of a signal: a device error naming it and the backend
    const Answer a = run(lib, "signal");
    CHECK(a.code == BALLAST_E_DEVICE_ERROR);
    CHECK(a.message == "device_error: the conformance runner died of signal 9 on backend signal");
  }
  {  // a runner that cannot be run: an io error naming it
    // No execute bit at all: execve refuses it even to root (EACCES).
    fs::permissions(runner, fs::perms::owner_read | fs::perms::owner_write);
    const Answer a = run(lib, "silent-ok");
    CHECK(a.code == BALLAST_E_IO);
    CHECK(a.message.rfind("io: cannot run " + runner.string() + ": ", 0) == 0);
  }
  {  // no runner: unavailable, naming where it was looked for
    fs::remove(runner);
    const Answer a = run(lib, "silent-ok");
    CHECK(a.code == BALLAST_E_UNAVAILABLE);
    CHECK(a.message == "unavailable: the conformance runner is not installed at " + runner.string() +
                           " (it is built and installed with BALLAST_BUILD_TESTS=ON)");
  }
}
