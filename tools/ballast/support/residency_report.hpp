// What `derive --residency` and `replay` share: the --residency and --budget
// options, creating the residency, the residency summary (text and JSON), the teardown check, and
// the process's peak resident memory.
#pragma once

#include <ballast/gpu_backend.hpp>
#include <ballast/model_resource.hpp>
#include <ballast/residency.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>

namespace ballast::cli {

// CLI11 check for --residency: empty when `text` names a strategy.
std::string check_residency(const std::string& text);

// --residency NAME and --budget TEXT as ResidencyOptions. `budget_text`
// empty or "auto": no budget given (the library's default: auto_budget's
// total for paged, unlimited otherwise). Both were checked by the option
// parser; an error here is still returned, never thrown.
Result<ResidencyOptions> residency_options(const std::string& strategy, const std::string& budget_text);

// Residency::create, its error in the words both commands print
// ("creating the residency: ...").
Result<std::unique_ptr<Residency>> create_residency(GpuBackend& gpu, const Model& model, const ResidencyOptions& options);

// "unlimited" or "4.35 MiB (4556576 B)".
std::string budget_string(std::uint64_t budget);

// Every ResidencyStats field, in declaration order; budget_bytes is null
// when unlimited.
nlohmann::ordered_json residency_stats_json(const ResidencyStats& s);

// A few indented lines: strategy and budget, peak and current device bytes,
// registered / uploaded / paged-in bytes, evictions, builds, prefetches,
// host copies, paging time.
void print_residency_summary(std::ostream& out, const ResidencyStats& s, const std::string& indent = "  ");

// Peak resident set of this process (getrusage ru_maxrss), in bytes.
std::uint64_t peak_rss_bytes();

// After a TeardownHost released everything: the report and the device's
// counters against those taken before anything was created.
struct TeardownCheck {
  TeardownReport report;
  AllocationCounters baseline;
  AllocationCounters after;
  bool back_to_baseline() const noexcept {
    return report.ok() && after.live_allocations == baseline.live_allocations &&
           after.live_registrations == baseline.live_registrations;
  }
};
// Adds "teardown" and "device_after_teardown" (derive's keys) to `doc`.
void add_teardown_json(nlohmann::ordered_json& doc, const TeardownCheck& t);
// The report's table and the "device after teardown" line.
void print_teardown(std::ostream& out, const TeardownCheck& t);

}  // namespace ballast::cli
