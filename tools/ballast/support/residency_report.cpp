#include "support/residency_report.hpp"

#include "support/budget.hpp"
#include "support/format.hpp"

#include <sys/resource.h>

#include <cstdio>
#include <ostream>

namespace ballast::cli {

std::string check_residency(const std::string& text) {
  auto s = parse_residency_strategy(text);
  if (s.ok()) return {};
  return "unknown residency strategy '" + text + "' (expected upload, zero-copy or paged)";
}

Result<ResidencyOptions> residency_options(const std::string& strategy, const std::string& budget_text) {
  ResidencyOptions options;
  BALLAST_ASSIGN_OR_RETURN(options.strategy, parse_residency_strategy(strategy));
  if (!budget_text.empty()) {
    std::optional<std::uint64_t> bytes;
    if (std::string why = parse_budget(budget_text, bytes); !why.empty())
      return make_error(ErrorCode::invalid_argument, why);
    options.budget_bytes = bytes;
  }
  return options;
}

Result<std::unique_ptr<Residency>> create_residency(GpuBackend& gpu, const Model& model, const ResidencyOptions& options) {
  auto residency = Residency::create(gpu, model, options);
  if (!residency.ok()) return Error(residency.error()).with_context("creating the residency");
  return residency;
}

std::string budget_string(std::uint64_t budget) {
  if (budget == kUnlimitedBudget) return "unlimited";
  return human_bytes(budget) + " (" + std::to_string(budget) + " B)";
}

nlohmann::ordered_json residency_stats_json(const ResidencyStats& s) {
  using json = nlohmann::ordered_json;
  json j;
  j["strategy"] = std::string(residency_strategy_name(s.strategy));
  j["budget_bytes"] = s.budget_bytes == kUnlimitedBudget ? json(nullptr) : json(s.budget_bytes);
  j["device_bytes"] = s.device_bytes;
  j["peak_device_bytes"] = s.peak_device_bytes;
  j["pinned_bytes"] = s.pinned_bytes;
  j["registered_bytes"] = s.registered_bytes;
  j["uploaded_bytes"] = s.uploaded_bytes;
  j["paged_in_bytes"] = s.paged_in_bytes;
  j["page_ins"] = s.page_ins;
  j["source_evictions"] = s.source_evictions;
  j["derived_evictions"] = s.derived_evictions;
  j["derived_builds"] = s.derived_builds;
  j["derived_rebuilds"] = s.derived_rebuilds;
  j["host_copy_bytes"] = s.host_copy_bytes;
  j["prefetches"] = s.prefetches;
  j["prefetches_skipped"] = s.prefetches_skipped;
  j["prefetches_failed"] = s.prefetches_failed;
  j["stuck_bytes"] = s.stuck_bytes;
  j["paging_seconds"] = s.paging_seconds;
  j["pool_hits"] = s.pool_hits;
  j["pool_misses"] = s.pool_misses;
  j["pool_releases"] = s.pool_releases;
  j["pooled_bytes"] = s.pooled_bytes;
  return j;
}

void print_residency_summary(std::ostream& out, const ResidencyStats& s, const std::string& indent) {
  char ms[32];
  std::snprintf(ms, sizeof ms, "%.3f ms", s.paging_seconds * 1e3);
  out << indent << "strategy " << residency_strategy_name(s.strategy) << ", budget " << budget_string(s.budget_bytes)
      << "\n";
  out << indent << "device bytes: peak " << human_bytes(s.peak_device_bytes);
  if (s.budget_bytes != kUnlimitedBudget) out << " (" << percent(s.peak_device_bytes, s.budget_bytes) << " of budget)";
  out << ", held now " << human_bytes(s.device_bytes) << ", pinned now " << human_bytes(s.pinned_bytes) << "\n";
  out << indent << "sources: registered " << human_bytes(s.registered_bytes) << ", uploaded "
      << human_bytes(s.uploaded_bytes) << ", paged in " << human_bytes(s.paged_in_bytes) << " in " << s.page_ins
      << " page-in(s)\n";
  out << indent << "evictions: " << s.source_evictions << " source, " << s.derived_evictions << " derived; derived builds "
      << s.derived_builds << " (" << s.derived_rebuilds << " rebuild(s))\n";
  out << indent << "prefetches: " << s.prefetches << " done, " << s.prefetches_skipped << " skipped, "
      << s.prefetches_failed << " failed; host copies " << human_bytes(s.host_copy_bytes) << "; paging time " << ms
      << "\n";
  out << indent << "block pool: " << s.pool_hits << " hit(s), " << s.pool_misses << " miss(es), " << s.pool_releases
      << " release(s); pooled now " << human_bytes(s.pooled_bytes);
  if (s.stuck_bytes != 0) out << "; " << human_bytes(s.stuck_bytes) << " the device refused to free";
  out << "\n";
}

std::uint64_t peak_rss_bytes() {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return static_cast<std::uint64_t>(u.ru_maxrss) * 1024;  // Linux reports KiB
}

void add_teardown_json(nlohmann::ordered_json& doc, const TeardownCheck& t) {
  doc["teardown"] = {{"ok", t.report.ok()},
                     {"bytes_freed", t.report.bytes_freed()},
                     {"allocations_freed", t.report.allocations_freed()},
                     {"failed_resources", t.report.failed_resources()}};
  doc["device_after_teardown"] = {{"live_allocations", t.after.live_allocations - t.baseline.live_allocations},
                                  {"live_registrations", t.after.live_registrations - t.baseline.live_registrations}};
}

void print_teardown(std::ostream& out, const TeardownCheck& t) {
  out << t.report.to_string();
  out << "device after teardown: " << t.after.live_allocations - t.baseline.live_allocations << " live allocation(s), "
      << t.after.live_registrations - t.baseline.live_registrations << " live registration(s)\n";
}

}  // namespace ballast::cli
