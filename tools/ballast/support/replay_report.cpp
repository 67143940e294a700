#include "support/replay_report.hpp"

#include "support/format.hpp"
#include "support/hot_copy.hpp"
#include "support/residency_report.hpp"

#include <cstdio>
#include <iostream>

namespace ballast::cli {
namespace {

using json = nlohmann::ordered_json;

json maybe(std::optional<double> v) { return v ? json(*v) : json(nullptr); }

std::string ms(std::optional<double> s) {
  if (!s) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.3f ms", *s * 1e3);
  return b;
}
std::string ratio_text(std::optional<double> r) {
  if (!r) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.2fx", *r);
  return b;
}
std::string gbps(std::optional<double> bps) {
  if (!bps) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.2f GB/s", *bps / 1e9);
  return b;
}

}  // namespace

ReplayToken token_delta(double seconds, const ResidencyStats& a, const ResidencyStats& b) {
  return {seconds,
          b.paged_in_bytes - a.paged_in_bytes,
          b.page_ins - a.page_ins,
          (b.source_evictions + b.derived_evictions) - (a.source_evictions + a.derived_evictions),
          b.derived_builds - a.derived_builds,
          b.derived_rebuilds - a.derived_rebuilds,
          b.prefetches - a.prefetches,
          b.paging_seconds - a.paging_seconds};
}

ReplaySummary::ReplaySummary(const std::vector<ReplayToken>& tokens, const Walk& walk, std::uint64_t budget) {
  if (budget != kUnlimitedBudget && walk.touched_bytes > budget) minimum = walk.touched_bytes - budget;
  if (tokens.size() < 2) return;
  double seconds = 0, paged = 0, paging = 0;
  for (std::size_t t = 1; t < tokens.size(); ++t) {
    seconds += tokens[t].seconds;
    paged += static_cast<double>(tokens[t].paged_in_bytes);
    paging += tokens[t].paging_seconds;
  }
  const double steady = static_cast<double>(tokens.size() - 1);
  steady_seconds = seconds / steady;
  steady_paged_bytes = paged / steady;
  steady_paging_seconds = paging / steady;
  if (minimum != 0) ratio = *steady_paged_bytes / static_cast<double>(minimum);
  if (paged > 0 && paging > 0) paging_bps = paged / paging;
}

void ReplaySummary::measure_anchor_now(const Model& model, const Walk& walk) {
  std::uint64_t bytes = steady_paged_bytes ? static_cast<std::uint64_t>(*steady_paged_bytes) : 0;
  if (bytes == 0) bytes = walk.source_bytes;
  auto a = measure_anchor(model.store(), walk.sources, bytes);
  if (a.ok()) anchor = *a;
  else anchor_error = a.error().to_string();
  auto h = measure_hot_copy(model.store(), walk.sources, bytes);
  if (h.ok()) hot = *h;
  else hot_error = h.error().to_string();
}

std::optional<double> ReplaySummary::hot_bps() const {
  if (hot && hot->seconds > 0) return hot->bytes_per_second();
  return std::nullopt;
}

std::optional<double> ReplaySummary::paging_vs_hot() const {
  if (paging_bps && hot_bps()) return *paging_bps / *hot_bps();
  return std::nullopt;
}

std::optional<double> ReplaySummary::anchor_bps() const {
  if (anchor && anchor->seconds > 0) return anchor->bytes_per_second();
  return std::nullopt;
}

std::optional<double> ReplaySummary::paging_vs_anchor() const {
  if (paging_bps && anchor_bps()) return *paging_bps / *anchor_bps();
  return std::nullopt;
}

std::optional<double> ReplaySummary::token_vs_page_ins() const {
  if (steady_seconds && steady_paging_seconds && *steady_paging_seconds > 0) return *steady_seconds / *steady_paging_seconds;
  return std::nullopt;
}

std::optional<double> ReplaySummary::token_vs_anchor() const {
  if (steady_seconds && steady_paged_bytes && *steady_paged_bytes > 0 && anchor_bps())
    return *steady_seconds / (*steady_paged_bytes / *anchor_bps());
  return std::nullopt;
}

void print_token_header() {
  std::printf("%6s %12s %12s %9s %10s %7s\n", "TOKEN", "TIME", "PAGED IN", "PAGE-INS", "EVICTIONS", "BUILDS");
}

void print_token(int t, const ReplayToken& k) {
  std::printf("%6d %9.3f ms %12s %9llu %10llu %7llu\n", t, k.seconds * 1e3, human_bytes(k.paged_in_bytes).c_str(),
              static_cast<unsigned long long>(k.page_ins), static_cast<unsigned long long>(k.evictions),
              static_cast<unsigned long long>(k.builds));
  std::fflush(stdout);
}

void print_summary(const ReplayOptions& opt, const std::vector<ReplayToken>& tokens, const Walk& walk, const ResidencyStats& st,
                   const ReplaySummary& s) {
  std::cout << "summary:\n";
  std::cout << "  tokens " << tokens.size() << "; first token " << ms(tokens.empty() ? std::nullopt : std::optional(tokens[0].seconds))
            << "; steady state (tokens 2-" << tokens.size() << ") " << ms(s.steady_seconds) << " per token\n";
  std::cout << "  paged in per steady token: "
            << (s.steady_paged_bytes ? human_bytes(static_cast<std::uint64_t>(*s.steady_paged_bytes)) : "-")
            << "; minimum " << human_bytes(s.minimum) << " (touched " << human_bytes(walk.touched_bytes)
            << " - budget, at least 0; rebuilding derived values from resident sources can page less); ratio "
            << ratio_text(s.ratio) << "\n";
  std::cout << "  peak device bytes " << human_bytes(st.peak_device_bytes) << " <= budget "
            << budget_string(st.budget_bytes) << ": " << (st.peak_device_bytes <= st.budget_bytes ? "yes" : "NO")
            << "; host copies " << human_bytes(st.host_copy_bytes) << "; peak RSS " << human_bytes(peak_rss_bytes())
            << "\n";
  std::cout << "residency:\n";
  print_residency_summary(std::cout, st);
  if (!opt.anchor) return;
  if (!s.anchor) {
    std::cout << "anchor: unavailable (" << s.anchor_error << ")\n";
    return;
  }
  std::cout << "anchor: memcpy of " << human_bytes(s.anchor->bytes) << " from the mapped files into fresh memory: "
            << ms(s.anchor->seconds) << ", " << gbps(s.anchor_bps()) << "; paging " << gbps(s.paging_bps)
            << " (paging / anchor " << ratio_text(s.paging_vs_anchor()) << ")\n";
  std::cout << "  steady token time / its page-in time " << ratio_text(s.token_vs_page_ins())
            << "; / its paged bytes at the anchor rate " << ratio_text(s.token_vs_anchor()) << "\n";
  if (!s.hot) {
    std::cout << "hot copy: unavailable (" << s.hot_error << ")\n";
    return;
  }
  std::cout << "hot copy (the physical limit): 2 threads, the same bytes into touched memory: " << ms(s.hot->seconds)
            << ", " << gbps(s.hot_bps()) << "; paging / hot copy " << ratio_text(s.paging_vs_hot()) << "\n";
}

json report_json(const ReplayOptions& opt, const Model& model, GpuBackend& gpu, const Walk& walk,
                 const std::vector<ReplayToken>& tokens, const ResidencyStats& st, const ReplaySummary& s) {
  json doc;
  doc["model"] = model.path().string();
  doc["backend"] = gpu.info().backend;
  doc["device"] = gpu.info().name;
  doc["options"] = {{"residency", opt.residency}, {"tokens", opt.tokens}, {"prefetch", opt.prefetch == "on"},
                    {"derived", opt.derived}};
  doc["walk"] = {{"steps", walk.steps.size()},       {"entries", walk.entry_bytes.size()},
                 {"touched_bytes", walk.touched_bytes}, {"largest_entry_bytes", walk.largest_entry},
                 {"source_weights", walk.sources.size()}, {"source_bytes", walk.source_bytes}};
  json per = json::array();
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    const ReplayToken& k = tokens[t];
    per.push_back({{"token", t + 1}, {"seconds", k.seconds}, {"paged_in_bytes", k.paged_in_bytes},
                   {"page_ins", k.page_ins}, {"evictions", k.evictions}, {"builds", k.builds},
                   {"rebuilds", k.rebuilds}, {"prefetches", k.prefetches}, {"paging_seconds", k.paging_seconds}});
  }
  doc["tokens"] = std::move(per);
  doc["summary"] = {{"tokens", tokens.size()},
                    {"first_token_seconds", tokens.empty() ? json(nullptr) : json(tokens[0].seconds)},
                    {"steady_token_seconds", maybe(s.steady_seconds)},
                    {"steady_paged_bytes_per_token", maybe(s.steady_paged_bytes)},
                    {"minimum_paged_bytes_per_token", s.minimum},
                    {"paged_vs_minimum", maybe(s.ratio)},
                    {"touched_bytes_per_token", walk.touched_bytes},
                    {"largest_entry_bytes", walk.largest_entry},
                    {"budget_bytes", st.budget_bytes == kUnlimitedBudget ? json(nullptr) : json(st.budget_bytes)},
                    {"peak_device_bytes", st.peak_device_bytes},
                    {"peak_within_budget", st.peak_device_bytes <= st.budget_bytes},
                    {"host_copy_bytes", st.host_copy_bytes},
                    {"peak_rss_bytes", peak_rss_bytes()}};
  doc["residency"] = residency_stats_json(st);
  if (opt.anchor) {
    doc["anchor"] = {{"bytes", s.anchor ? json(s.anchor->bytes) : json(nullptr)},
                     {"seconds", s.anchor ? json(s.anchor->seconds) : json(nullptr)},
                     {"anchor_bytes_per_second", maybe(s.anchor_bps())},
                     {"paging_bytes_per_second", maybe(s.paging_bps)},
                     {"paging_vs_anchor", maybe(s.paging_vs_anchor())},
                     {"token_vs_page_in_time", maybe(s.token_vs_page_ins())},
                     {"token_vs_anchor_time", maybe(s.token_vs_anchor())},
                     {"error", s.anchor ? json(nullptr) : json(s.anchor_error)},
                     {"hot_copy_seconds", s.hot ? json(s.hot->seconds) : json(nullptr)},
                     {"hot_copy_threads", 2},
                     {"hot_copy_bytes_per_second", maybe(s.hot_bps())},
                     {"paging_vs_hot_copy", maybe(s.paging_vs_hot())},
                     {"hot_copy_error", s.hot ? json(nullptr) : json(s.hot_error)}};
  }
  return doc;
}
}  // namespace ballast::cli
