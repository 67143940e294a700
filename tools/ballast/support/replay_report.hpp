// What `ballast replay` reports: per-token deltas of the residency's
// stats, the summary (steady state against the least paging the budget
// allows, the physical anchor), as text and as one JSON document.
#pragma once

#include "support/replay_walk.hpp"

#include <ballast/gpu_backend.hpp>
#include <ballast/model.hpp>
#include <ballast/onnx_loader.hpp>
#include <ballast/residency.hpp>

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace ballast::cli {

struct ReplayOptions {
  std::string model;
  LoadOptions load;  // --allow-model-real-dir
  std::string backend = "cpu";
  std::string residency = "paged";
  std::string budget;
  int tokens = 4;
  std::string prefetch = "off";
  std::string derived = "first";
  std::string rules;  // --rules FILE: a model without a graph's derivation rules (support/rules_file.hpp)
  bool json = false;
  bool anchor = false;
};

// One token: its wall time and what the residency did meanwhile.
struct ReplayToken {
  double seconds = 0;
  std::uint64_t paged_in_bytes = 0, page_ins = 0, evictions = 0, builds = 0, rebuilds = 0, prefetches = 0;
  double paging_seconds = 0;
};

ReplayToken token_delta(double seconds, const ResidencyStats& before, const ResidencyStats& after);

// Everything the summary says, computed once for text and JSON.
struct ReplaySummary {
  std::optional<double> steady_seconds, steady_paged_bytes, ratio, paging_bps, steady_paging_seconds;
  std::uint64_t minimum = 0;  // max(0, touched bytes - budget)
  std::optional<Anchor> anchor;
  std::string anchor_error;
  // The physical limit: the same bytes copied by two threads into touched
  // memory (support/hot_copy.hpp). The anchor above is the copy into fresh
  // memory, which pays a first-touch fault per page.
  std::optional<Anchor> hot;
  std::string hot_error;

  ReplaySummary(const std::vector<ReplayToken>& tokens, const Walk& walk, std::uint64_t budget);
  // The anchors: the steady per-token paged bytes (or, when none were
  // paged, the walk's source bytes) copied out of the model's mapped files,
  // into fresh memory by one thread and into touched memory by two.
  void measure_anchor_now(const Model& model, const Walk& walk);
  std::optional<double> anchor_bps() const;
  std::optional<double> paging_vs_anchor() const;
  std::optional<double> hot_bps() const;
  std::optional<double> paging_vs_hot() const;
  std::optional<double> token_vs_page_ins() const;
  std::optional<double> token_vs_anchor() const;
};

void print_token_header();
void print_token(int token, const ReplayToken& k);
void print_summary(const ReplayOptions& opt, const std::vector<ReplayToken>& tokens, const Walk& walk,
                   const ResidencyStats& st, const ReplaySummary& s);
nlohmann::ordered_json report_json(const ReplayOptions& opt, const Model& model, GpuBackend& gpu, const Walk& walk,
                                   const std::vector<ReplayToken>& tokens, const ResidencyStats& st, const ReplaySummary& s);

}  // namespace ballast::cli
