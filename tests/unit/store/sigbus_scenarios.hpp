// SIGBUS in a fresh process: which handler was installed before ballast's
// matters, so the tests of the guard's chaining run one scenario per child,
// this binary again, re-executed with one test case and
// BALLAST_SIGBUS_SCENARIO set.
#pragma once

#include "unit/store/file_change_helpers.hpp"
#include "unit/store/scratch_dir.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>

namespace ballast::testing {

// ASan's and TSan's own SIGBUS handlers are the "previous" one under those
// sanitizers: they report the fault, then exit non-zero (1 and 66).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitizerReportsBus = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitizerReportsBus = true;
#else
inline constexpr bool kSanitizerReportsBus = false;
#endif
#else
inline constexpr bool kSanitizerReportsBus = false;
#endif

// A mapping of a file that was then truncated to nothing: every byte of it
// faults. Writable, for the destination scenario.
inline std::byte* vanished_mapping(const ScratchDir& dir, std::size_t size) {
  const std::filesystem::path p = dir / "vanished.bin";
  write_file(p, byte_pattern(size, 5));
  const int fd = ::open(p.c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0);
  void* m = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  REQUIRE(m != MAP_FAILED);
  truncate_file(p, 0);
  return static_cast<std::byte*>(m);
}

// The engine's handler in the scenarios: exits 42.
[[noreturn]] inline void engine_handler(int) { ::_exit(42); }

inline void install_engine_handler() {
  struct sigaction sa {};
  sa.sa_handler = engine_handler;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, &sa, nullptr);
}

// Runs this binary (`binary`: its name, for argv[0]) in a child, with only
// the test case `test_case` and BALLAST_SIGBUS_SCENARIO=<scenario>; returns
// its wait status.
inline int run_scenario(const char* binary, const char* test_case, const char* scenario) {
  const std::string filter = std::string("--test-case=") + test_case;
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    struct rlimit no_core {};
    ::setrlimit(RLIMIT_CORE, &no_core);
    ::alarm(60);  // a handler that returns to a fault it did not fix loops forever: end it
    ::setenv("BALLAST_SIGBUS_SCENARIO", scenario, 1);
    ::execl("/proc/self/exe", binary, filter.c_str(), "--no-version", "--minimal", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return status;
}

// Died of SIGBUS, as a process without ballast would have (under ASan or
// TSan, the sanitizer reports the fault and exits non-zero instead).
inline bool died_of_sigbus(int status) {
  if (WIFSIGNALED(status)) return WTERMSIG(status) == SIGBUS;
  return kSanitizerReportsBus && WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 42;
}

}  // namespace ballast::testing
