// The end of every conformance run: one block a person can paste into a bug
// report (backend, device, ballast build, every case's outcome, each
// failure's message), as text or JSON. A doctest listener (summary.cpp)
// collects the outcomes while the normal console output runs as usual.
#pragma once

#include <ballast/gpu_backend.hpp>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace conformance {

struct CaseOutcome {
  enum class State { passed, failed, skipped };
  std::string name;
  State state = State::passed;
  std::vector<std::string> messages;  // each failure, or the skip reason
};

// Outcomes collected so far, in run order.
std::vector<CaseOutcome> case_outcomes();

struct RunSummary {
  std::string config;                      // --backend as given
  std::optional<ballast::DeviceInfo> device;  // absent when the backend did not open
  std::string skipped;                     // whole run skipped: why (backend not on this machine)
  std::string open_error;                  // the backend failed to open: why
  std::string leaks;                       // run-level leak, if any
  int exit_code = 0;
};

void print_summary(const RunSummary& run, bool json, std::FILE* out);

}  // namespace conformance
