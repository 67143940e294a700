// Issue 24 §4: a SIGBUS that is not ballast's reaches exactly the
// disposition the engine installed, with its flags, as if ballast were not
// loaded. Each scenario runs twice in fresh processes (sigbus_scenarios.hpp):
// once with the guard installed after the engine's disposition, once
// without ballast's handler at all, and the two outcomes must be equal.
#include "store/sigbus_guard.hpp"

#include "unit/store/sigbus_scenarios.hpp"

#include <doctest/doctest.h>

#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace ballast;
using namespace ballast::testing;

namespace {

volatile sig_atomic_t g_runs = 0;
volatile sig_atomic_t g_bus_blocked = -1;   // SIGBUS blocked while the handler ran
volatile sig_atomic_t g_usr1_blocked = -1;  // SIGUSR1 (in the handler's sa_mask) blocked while it ran

void record(int) {
  g_runs = g_runs + 1;  // not ++: C++20 deprecates it on a volatile
  sigset_t now;
  ::pthread_sigmask(SIG_SETMASK, nullptr, &now);
  g_bus_blocked = sigismember(&now, SIGBUS);
  g_usr1_blocked = sigismember(&now, SIGUSR1);
}

void record_info(int sig, siginfo_t* info, void*) {
  record(sig);
  if (info == nullptr || info->si_signo != SIGBUS) ::_exit(9);
}

void install(void (*handler)(int), int flags, bool mask_usr1) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sa.sa_flags = flags;
  sigemptyset(&sa.sa_mask);
  if (mask_usr1) sigaddset(&sa.sa_mask, SIGUSR1);
  ::sigaction(SIGBUS, &sa, nullptr);
}

// The outcome a parent sees: exit code (the child encodes what its handler
// saw) or the signal it died of.
std::string outcome(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + ::strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

int run(const char* scenario, bool with_guard) {
  const std::string s = std::string(scenario) + (with_guard ? "+guard" : "+none");
  return run_scenario("unit_store_signal_semantics", "signal semantics scenario (child process)", s.c_str());
}

// Encodes what the handler saw into an exit code: runs, SIGBUS blocked,
// SIGUSR1 blocked (each -1, 0 or 1 read as 0, 1, 2).
[[noreturn]] void exit_with_observations() {
  ::_exit(static_cast<int>(10 + g_runs * 9 + (g_bus_blocked + 1) * 3 + (g_usr1_blocked + 1)));
}

}  // namespace

TEST_CASE("signal semantics scenario (child process)") {
  const char* env = std::getenv("BALLAST_SIGBUS_SCENARIO");
  if (env == nullptr) return;  // only ever run by run_scenario()
  const std::string arg = env;
  const bool with_guard = arg.size() > 6 && arg.substr(arg.size() - 6) == "+guard";
  const std::string s = arg.substr(0, arg.rfind('+'));
  ScratchDir dir("signal-semantics");
  std::byte* gone = vanished_mapping(dir, 8192);

  // The engine's disposition first, then ballast's guard (as when the
  // engine sets its handlers before it opens a model).
  if (s == "ignore_sent" || s == "ignore_fault") ::signal(SIGBUS, SIG_IGN);
  if (s == "ignore_siginfo_sent") {  // SIG_IGN with SA_SIGINFO set: still ignored, never called
    struct sigaction sa {};
    sa.sa_handler = SIG_IGN;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, nullptr);
  }
  if (s == "resethand_sent" || s == "resethand_fault") install(record, SA_RESETHAND, false);
  if (s == "nodefer") install(record, SA_NODEFER, false);
  if (s == "mask") install(record, 0, true);
  if (s == "siginfo") {
    struct sigaction sa {};
    sa.sa_sigaction = record_info;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, nullptr);
  }
  if (with_guard) {
    std::vector<std::byte> a(64), b(64);
    REQUIRE(store::guarded_copy(a.data(), b.data(), a.size()));  // installs ballast's handler
    if (!store::sigbus_guard_installed()) ::_exit(3);
  }

  volatile std::byte sink{};
  if (s == "ignore_sent" || s == "ignore_siginfo_sent") {
    ::raise(SIGBUS);  // ignored: goes on
    ::_exit(0);
  } else if (s == "ignore_fault") {
    sink = gone[100];  // a fault cannot be ignored: the kernel's default kills
    ::_exit(0);
  } else if (s == "resethand_sent") {
    ::raise(SIGBUS);  // runs the handler once...
    if (g_runs != 1) exit_with_observations();
    ::raise(SIGBUS);  // ...then the default: dies
    exit_with_observations();
  } else if (s == "resethand_fault") {
    sink = gone[100];  // the handler returns, the load faults again: the default kills
    exit_with_observations();
  } else if (s == "nodefer" || s == "mask" || s == "siginfo") {
    ::raise(SIGBUS);
    exit_with_observations();
  }
  static_cast<void>(sink);
  ::_exit(2);
}

TEST_CASE("a SIGBUS outside ballast's ranges meets the engine's own disposition, flags and mask included") {
  // Expected outcomes without ballast, stated, so a wrong baseline (a test
  // process that inherited odd dispositions) fails too.
  struct Case {
    const char* scenario;
    const char* expected;  // outcome() of the run without ballast's handler
  };
  const std::string killed = outcome([] {
    // What "died of SIGBUS" looks like from here (a sanitizer reports
    // instead of dying: then the scenario's own baseline is the reference).
    return run("ignore_fault", false);
  }());
  for (const char* s : {"ignore_sent", "ignore_siginfo_sent", "ignore_fault", "resethand_sent", "resethand_fault", "nodefer", "mask", "siginfo"}) {
    CAPTURE(s);
    const int without = run(s, false);
    const int with = run(s, true);
    CHECK_MESSAGE(outcome(with) == outcome(without),
                  "with ballast: " << outcome(with) << "; without: " << outcome(without));
    if (std::string(s) == "ignore_sent" || std::string(s) == "ignore_siginfo_sent") CHECK(outcome(without) == "exit 0");
    if (std::string(s) == "ignore_fault" || std::string(s) == "resethand_sent" || std::string(s) == "resethand_fault")
      CHECK(outcome(without) == killed);
  }
  if (!kSanitizerReportsBus) CHECK(killed == std::string("signal ") + ::strsignal(SIGBUS));
  // SA_NODEFER: SIGBUS not blocked in the handler, one run (10 + 9 + 3 + 1);
  // sa_mask: SIGBUS and SIGUSR1 blocked (10 + 9 + 6 + 2).
  CHECK(outcome(run("nodefer", false)) == "exit 23");
  CHECK(outcome(run("mask", false)) == "exit 27");
}
