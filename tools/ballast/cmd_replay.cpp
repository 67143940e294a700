// ballast replay MODEL --backend NAME [--residency S] [--budget B] [--tokens N]
// [--prefetch on|off] [--derived first|all|none] [--json] [--anchor]:
// a load generator shaped like an engine's decode loop. The walk (the
// graph's weights in node order, support/replay_walk.hpp) is pinned step by
// step once per token through a Residency; each pinned value is touched on
// the device (its first 64 bytes read back) and compared with what token 1
// read, which is what catches a stale pointer after an eviction. Reports per
// token what was paged in, evicted and built, and against the budget the
// least paging any policy could do. Schema and example: docs/tools.md.
#include "command.hpp"
#include "command_context.hpp"
#include "command_options.hpp"
#include "support/budget.hpp"
#include "support/format.hpp"
#include "support/progress.hpp"
#include "support/replay_report.hpp"
#include "support/replay_walk.hpp"
#include "support/residency_report.hpp"
#include "support/rules_file.hpp"

#include <ballast/model_resource.hpp>
#include <ballast/residency.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <limits>

namespace ballast::cli {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::ordered_json;

constexpr std::uint64_t kTouchBytes = 64;

// The first bytes of a pinned value as one token saw them.
struct Touch {
  std::array<std::byte, kTouchBytes> first{}, second{};
};

class Replayer {
 public:
  Replayer(const ReplayOptions& opt, const Model& model, GpuBackend& gpu, Residency& residency, const Walk& walk)
      : opt_(opt), model_(model), gpu_(gpu), residency_(residency), walk_(walk), seen_(walk.steps.size()) {
    const std::uint64_t budget = residency.budget();
    window_bytes_ = budget == kUnlimitedBudget ? budget : std::max<std::uint64_t>(budget / 8, 1);
  }

  // Runs every token; stops at the first error (a mismatch sets mismatch()).
  Status run() {
    const std::size_t n = walk_.steps.size();
    const std::size_t limit = n * static_cast<std::size_t>(opt_.tokens);
    for (int t = 0; t < opt_.tokens; ++t) {
      const ResidencyStats before = residency_.stats();
      const auto start = Clock::now();
      Status s;
      {
        ProgressBar bar("token " + std::to_string(t + 1), walk_.touched_bytes);
        for (std::size_t i = 0; i < n && s.ok(); ++i) {
          if (opt_.prefetch == "on") prefetch_before(t * n + i, limit);
          s = step(t, i);
          bar.advance(walk_.steps[i].bytes());
        }
      }
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      tokens_.push_back(token_delta(seconds, before, residency_.stats()));
      if (!opt_.json) print_token(t + 1, tokens_.back());
      if (!s.ok()) return s;
    }
    residency_.wait_for_prefetches();
    return Status();
  }

  bool mismatch() const noexcept { return mismatch_; }
  const std::vector<ReplayToken>& tokens() const noexcept { return tokens_; }

 private:
  // Before global step g: the steps after it, up to the window, each
  // requested once (runs of derived steps and of source steps in one call).
  void prefetch_before(std::size_t g, std::size_t limit) {
    const std::size_t n = walk_.steps.size();
    const std::size_t end = prefetch_window_end(walk_, g + 1, limit, window_bytes_);
    std::vector<PlannedDerivation> derived;
    std::vector<ValueId> sources;
    auto flush = [&] {
      if (!derived.empty()) residency_.prefetch(std::span<const PlannedDerivation>(derived));
      if (!sources.empty()) residency_.prefetch(std::span<const ValueId>(sources));
      derived.clear();
      sources.clear();
    };
    for (std::size_t at = std::max(prefetched_to_, g + 1); at < end; ++at) {
      const WalkStep& s = walk_.steps[at % n];
      if (s.derived ? !sources.empty() : !derived.empty()) flush();  // a run of the other kind ends
      if (s.derived) derived.push_back(s.planned);
      else sources.push_back(s.weight);
    }
    flush();
    prefetched_to_ = std::max(prefetched_to_, end);
  }

  Status step(int t, std::size_t i) {
    const WalkStep& s = walk_.steps[i];
    auto where = [&] { return "token " + std::to_string(t + 1) + ", step " + std::to_string(i + 1) + " (" + s.label + ")"; };
    auto pinned = s.derived ? residency_.pin(s.planned) : residency_.pin(s.weight);
    if (!pinned.ok()) return Error(pinned.error()).with_context("pinning " + where());
    if (pinned->bytes() != s.bytes())
      return make_error(ErrorCode::internal, where() + ": the pinned value has " + std::to_string(pinned->bytes()) +
                                                 " bytes, the plan says " + std::to_string(s.bytes()));
    Touch now;
    const std::size_t n1 = static_cast<std::size_t>(std::min(s.first_bytes, kTouchBytes));
    const std::size_t n2 = static_cast<std::size_t>(std::min(s.second_bytes, kTouchBytes));
    if (n1 != 0)
      BALLAST_RETURN_IF_ERROR(gpu_.copy_to_host(std::span(now.first.data(), n1), pinned->first(), 0), "touching ",
                              where());
    if (n2 != 0)
      BALLAST_RETURN_IF_ERROR(gpu_.copy_to_host(std::span(now.second.data(), n2), pinned->second(), 0),
                              "touching the second half of ", where());
    pinned->reset();
    if (t == 0) {
      if (!s.derived && n1 != 0) {  // a source reads back as its file holds it
        Touch file;
        const WeightRef& w = model_.store().weights().at(s.weight);
        BALLAST_RETURN_IF_ERROR(model_.store().copy_bytes(w, 0, std::span(file.first.data(), n1)), "reading ", where());
        if (std::memcmp(file.first.data(), now.first.data(), n1) != 0) return mismatch(where(), "the model's file");
      }
      seen_[i] = now;
      return Status();
    }
    if (std::memcmp(seen_[i].first.data(), now.first.data(), n1) != 0 ||
        std::memcmp(seen_[i].second.data(), now.second.data(), n2) != 0)
      return mismatch(where(), "token 1");
    return Status();
  }

  Status mismatch(const std::string& where, const std::string& reference) {
    mismatch_ = true;
    return make_error(ErrorCode::internal, "the first bytes of " + where + " differ from what " + reference +
                                               " read: a stale or wrong device value");
  }

  const ReplayOptions& opt_;
  const Model& model_;
  GpuBackend& gpu_;
  Residency& residency_;
  const Walk& walk_;
  std::vector<Touch> seen_;
  std::vector<ReplayToken> tokens_;
  std::uint64_t window_bytes_ = 0;
  std::size_t prefetched_to_ = 0;
  bool mismatch_ = false;
};

int run_replay(const ReplayOptions& opt) {
  CommandContext ctx("replay");
  auto options = residency_options(opt.residency, opt.budget);
  if (!options.ok()) return ctx.fail(options.error());
  if (!ctx.load_model(opt.model, opt.load)) return ctx.exit_code();
  const Model& model = ctx.model();
  const DerivedMode mode = opt.derived == "all" ? DerivedMode::all : opt.derived == "none" ? DerivedMode::none : DerivedMode::first;
  PlanOptions planning;
  if (!opt.rules.empty()) {
    // The walk of a graph follows its nodes, which rules do not name: refused, not ignored.
    if (!model.nodes().empty())
      return ctx.fail(make_error(ErrorCode::invalid_argument,
                                 "--rules plans a model without a graph; this one has a graph, whose nodes the walk "
                                 "follows (derive --rules adds rules to a graph's plan)"));
    if (Status s = read_rules_file(opt.rules, planning); !s.ok()) return ctx.fail(s.error());
  }
  auto walk = build_walk(model, mode, planning);  // plans the derivations itself: the walk pins what it picks of them
  if (!walk.ok()) return ctx.fail(walk.error());
  // auto (and the largest-entry check) counts the derivations the walk pins, no others.
  options->derivations.emplace();
  for (const WalkStep& step : walk->steps)
    if (step.derived) options->derivations->push_back(step.planned);
  if (!ctx.open_backend(opt.backend)) return ctx.exit_code();
  GpuBackend& gpu = ctx.gpu();
  TeardownCheck check;
  check.baseline = gpu.counters();
  Status failure;
  bool mismatch = false;
  json doc;
  {
    auto residency = create_residency(gpu, model, *options);
    if (!residency.ok()) return ctx.fail(residency.error());
    TeardownHost<GpuBackend> host(gpu);
    host.add(**residency);
    if (!opt.json) {
      std::cout << "replay of " << model.path().string() << " on " << gpu.info().backend << " (" << gpu.info().name
                << "): " << opt.residency << ", budget " << budget_string((*residency)->budget()) << ", " << opt.tokens
                << " token(s), prefetch " << opt.prefetch << ", derived " << opt.derived << "\n";
      std::cout << "walk: " << walk->steps.size() << " step(s) per token, " << walk->entry_bytes.size()
                << " distinct value(s) touching " << human_bytes(walk->touched_bytes) << " (largest "
                << human_bytes(walk->largest_entry) << "); " << walk->sources.size() << " source weight(s) of "
                << human_bytes(walk->source_bytes) << "\n";
    }
    Replayer r(opt, model, gpu, **residency, *walk);
    if (!opt.json) print_token_header();
    failure = r.run();
    mismatch = r.mismatch();
    const ResidencyStats st = (*residency)->stats();
    check.report = host.teardown(gpu);
    ReplaySummary s(r.tokens(), *walk, st.budget_bytes);
    if (opt.anchor && failure.ok()) s.measure_anchor_now(model, *walk);
    if (opt.json) doc = report_json(opt, model, gpu, *walk, r.tokens(), st, s);
    else print_summary(opt, r.tokens(), *walk, st, s);
  }
  check.after = gpu.counters();
  // A mismatch is a finding about the device's values, not bad input.
  return ctx.finish(failure, check, opt.json ? &doc : nullptr, mismatch ? kExitVerifyFailed : kExitBadInput);
}

const RegisterCommand kReplay{{
    "replay",
    "Replay an engine's decode loop over MODEL's weights through a Residency, token by token",
    [](CLI::App& sub) {
      auto opt = std::make_shared<ReplayOptions>();
      add_model_options(sub, opt->model, opt->backend);
      add_residency_options(sub, opt->residency, opt->budget);
      sub.add_option("--tokens", opt->tokens, "tokens to replay")->check(CLI::Range(1, 1000000))->capture_default_str();
      sub.add_option("--prefetch", opt->prefetch, "prefetch the next steps before each pin")
          ->check(CLI::IsMember({"on", "off"}))
          ->capture_default_str();
      sub.add_option("--derived", opt->derived, "pin each consumer's first derivation, all of them, or the source")
          ->check(CLI::IsMember({"first", "all", "none"}))
          ->capture_default_str();
      sub.add_option("--rules", opt->rules,
                     "derivation rules for a model with no graph (safetensors, GGUF): weight-name patterns -> "
                     "derivations (JSON; docs/derivations.md, Rules). Without it the built-in rules plan them")
          ->type_name("FILE");
      sub.add_flag("--json", opt->json, "print the report as one JSON document (schema in docs/tools.md)");
      add_model_real_dir_option(sub, opt->load);
      add_allow_holes_option(sub, opt->load);
      sub.add_flag("--anchor", opt->anchor, "after the run, time a plain memcpy of the paged bytes out of the mapped files");
      return [opt] { return run_replay(*opt); };
    },
}};

}  // namespace
}  // namespace ballast::cli
