// ballast derive MODEL --backend NAME [--residency S [--budget B] [--only K,...]]
// [--dump DIR] [--json]: the main job end to end, as one path whatever the
// options. It opens the model, plans every derivation that applies, opens
// the backend, has a strategy (derive_strategy.hpp) produce each planned
// value on the device (through the DerivedWeights memo, or with --residency
// pinned through a Residency and hashed), writes each to the same --dump
// files either way, reports, then tears everything down and reports that
// too (as one JSON document with --json; schema in docs/tools.md).
#include "command.hpp"
#include "command_context.hpp"
#include "command_options.hpp"
#include "derive_strategy.hpp"
#include "load_ranks.hpp"
#include "support/budget.hpp"
#include "support/derived_dump.hpp"
#include "support/residency_report.hpp"
#include "support/rules_file.hpp"

#include <ballast/printable.hpp>

#include <ballast/derive.hpp>
#include <ballast/residency.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ballast::cli {
namespace {

struct DeriveOptions {
  std::string model;
  LoadOptions load;  // --allow-model-real-dir
  std::string backend = "cpu";
  std::string dump;  // empty: no --dump
  bool json = false;
  double max_amplification = kDefaultMaxAmplification;  // PlanOptions::max_amplification (0: no cap)
  std::string residency;  // empty: the memo strategy; else upload | zero-copy | paged
  std::string budget;     // with --residency: empty (not given), a byte count or "auto"
  std::string only;       // with --residency: empty (every kind) or "kind[,kind...]"
  std::string rules;      // --rules FILE: derivation rules (support/rules_file.hpp)
  // --comm local|mpi: each tensor-parallel rank derives its shards (load_ranks.hpp).
  CommOptions comm;
};

// Where each planned derivation came from ("graph", or the rule's name, read
// back from its why) and what the rules could not plan.
std::string plan_source(const PlannedDerivation& p) {
  constexpr std::string_view kRule = "rule ";
  if (p.why.rfind(kRule, 0) != 0) return "graph";
  const std::size_t end = p.why.find(' ', kRule.size());
  return p.why.substr(kRule.size(), end == std::string::npos ? std::string::npos : end - kRule.size());
}

void print_plan(std::ostream& out, const std::vector<PlannedDerivation>& plan, const std::vector<PlanSkip>& skipped) {
  // Sources in first-seen order, counted through an index (a rules file
  // may hold many rules; a plan, many entries).
  std::vector<std::pair<std::string, std::size_t>> sources;
  std::unordered_map<std::string, std::size_t> source_at;
  for (const PlannedDerivation& p : plan) {
    std::string s = plan_source(p);
    auto [it, added] = source_at.try_emplace(s, sources.size());
    if (added) sources.emplace_back(std::move(s), 0);
    ++sources[it->second].second;
  }
  out << "plan: " << plan.size() << " derivation" << (plan.size() == 1 ? "" : "s");
  for (std::size_t i = 0; i < sources.size(); ++i)
    out << (i ? ", " : ": ") << sources[i].second << (sources[i].first == "graph" ? " from the graph" : " by rule " + sources[i].first);
  out << '\n';
  // A rule's skip names the rule; the graph's, the node it was read off.
  // The graph's skips of one reason (quant_int8 of every bfloat16 B) are
  // one line with their count; --json lists each.
  std::vector<std::pair<const PlanSkip*, std::size_t>> lines;
  std::unordered_map<std::string_view, std::size_t> line_of_reason;  // graph skips of a weight only
  for (const PlanSkip& s : skipped) {
    if (!s.rule.empty() || s.weight.empty()) {
      lines.emplace_back(&s, 1);
      continue;
    }
    auto [it, added] = line_of_reason.try_emplace(s.reason, lines.size());
    if (added)
      lines.emplace_back(&s, 1);
    else
      ++lines[it->second].second;
  }
  constexpr std::size_t kShown = 20;  // --json lists them all
  std::size_t more = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto& [s, count] = lines[i];
    if (i >= kShown) {
      more += count;
      continue;
    }
    // Escaped whole: the parts it joins meet at ASCII (" on "), so this is
    // the escape of each part.
    out << "  skipped: " << printable(plan_skip_subject(*s))
        << (count > 1 ? " and " + std::to_string(count - 1) + " more weight" + (count > 2 ? "s" : "") : "") << ": "
        << printable(s->reason) << '\n';
  }
  if (more > 0) out << "  ... " << more << " more skipped (see --json)\n";
}

nlohmann::ordered_json plan_json(const std::vector<PlannedDerivation>& plan, const std::vector<PlanSkip>& skipped) {
  using json = nlohmann::ordered_json;
  json planned = json::array();
  for (const PlannedDerivation& p : plan)
    planned.push_back({{"weight", p.weight},
                       {"derivation", std::string(derivation_name(p.kind()))},
                       {"source", plan_source(p)},
                       {"node", p.node},
                       {"why", p.why}});
  json skips = json::array();
  for (const PlanSkip& s : skipped)
    skips.push_back({{"source", s.rule.empty() ? std::string("graph") : s.rule},
                     {"rule", s.rule},
                     {"node", s.node},
                     {"weight", s.weight},
                     {"reason", s.reason}});
  return {{"planned", std::move(planned)}, {"skipped", std::move(skips)}};
}

std::optional<Derivation> derivation_named(std::string_view name) {
  for (int k = 0; k < kDerivationCount; ++k)
    if (derivation_name(static_cast<Derivation>(k)) == name) return static_cast<Derivation>(k);
  return std::nullopt;
}

std::vector<std::string_view> split_commas(std::string_view text) {
  std::vector<std::string_view> out;
  for (std::size_t at = 0;;) {
    const std::size_t comma = text.find(',', at);
    out.push_back(text.substr(at, comma == std::string_view::npos ? std::string_view::npos : comma - at));
    if (comma == std::string_view::npos) return out;
    at = comma + 1;
  }
}

// CLI11 check for --only: empty when every comma-separated name is a derivation.
std::string check_derivation_kinds(const std::string& text) {
  for (std::string_view name : split_commas(text)) {
    if (!derivation_named(name)) {
      std::string expected;
      for (const kinds::Kind& k : kinds::kTable) expected += (expected.empty() ? "" : ", ") + std::string(k.name);
      return "unknown derivation '" + std::string(name) + "' (expected one of " + expected + ", comma-separated)";
    }
  }
  return {};
}

// --only: drops the planned derivations of every other kind.
void keep_only(std::vector<PlannedDerivation>& plan, std::string_view kinds) {
  std::array<bool, kDerivationCount> keep{};
  for (std::string_view name : split_commas(kinds)) {
    if (auto k = derivation_named(name)) keep[static_cast<std::size_t>(*k)] = true;
  }
  std::erase_if(plan, [&](const PlannedDerivation& p) { return !keep[static_cast<std::size_t>(p.kind())]; });
}

int run_derive(const DeriveOptions& opt) {
  if (!opt.comm.config.empty()) {  // --comm "" is refused by its check
    RanksOptions ranks;
    ranks.command = "derive";
    ranks.max_amplification = opt.max_amplification;
    ranks.model = opt.model;
    ranks.load = opt.load;
    ranks.backend = opt.backend;
    ranks.comm = opt.comm;
    ranks.dump = opt.dump;
    ranks.json = opt.json;
    ranks.derive = true;
    ranks.rules = opt.rules;
    ranks.residency = opt.residency;
    ranks.budget = opt.budget;
    return run_load_ranks(ranks);
  }
  const auto start = std::chrono::steady_clock::now();  // --residency's time to first derivation counts opening
  CommandContext ctx("derive");
  std::optional<ResidencyOptions> residency;  // set with --residency
  if (!opt.residency.empty()) {
    auto options = residency_options(opt.residency, opt.budget);
    if (!options.ok()) return ctx.fail(options.error());
    residency = std::move(*options);
    residency->max_amplification = opt.max_amplification;
  }
  PlanOptions planning;
  planning.max_amplification = opt.max_amplification;
  if (!opt.rules.empty())
    if (Status s = read_rules_file(opt.rules, planning); !s.ok()) return ctx.fail(s.error());
  if (!ctx.load_model(opt.model, opt.load) || !ctx.plan_derivations(std::move(planning))) return ctx.exit_code();
  if (residency && !opt.only.empty()) {  // --only needs --residency
    keep_only(ctx.plan(), opt.only);
    residency->derivations = ctx.plan();  // auto (and the largest-entry check) counts only what this run pins
  }
  // A stem depends on the entries of its own weight and kind only, which
  // --only keeps or drops together: the names are the whole plan's.
  const std::vector<std::string> stems = dump_stems(ctx.plan());
  if (!ctx.open_backend(opt.backend)) return ctx.exit_code();
  std::optional<DerivedDump> dump;
  if (!opt.dump.empty()) {
    auto opened = DerivedDump::open(opt.dump);
    if (!opened.ok()) return ctx.fail(opened.error());
    dump.emplace(std::move(*opened));
  }
  DerivedDump* const dump_to = dump ? &*dump : nullptr;

  TeardownCheck check;
  check.baseline = ctx.gpu().counters();
  Status failure;
  nlohmann::ordered_json doc;
  std::ostringstream text;
  {
    auto strategy = residency ? residency_strategy(ctx.model(), ctx.gpu(), *residency, start, dump_to)
                              : Result<std::unique_ptr<DeriveStrategy>>(memo_strategy(ctx.model(), ctx.gpu(), dump_to));
    if (!strategy.ok()) return ctx.fail(strategy.error());
    failure = (*strategy)->run(ctx.plan(), stems);
    if (opt.json) {
      doc["model"] = ctx.model().path().string();
      doc["backend"] = ctx.gpu().info().backend;
      doc["device"] = ctx.gpu().info().name;
      doc["plan"] = plan_json(ctx.plan(), ctx.skipped());
      doc.update((*strategy)->to_json());
    } else {
      print_plan(text, ctx.plan(), ctx.skipped());
      (*strategy)->print(text);
    }
    check.report = (*strategy)->teardown();
  }
  check.after = ctx.gpu().counters();
  std::cout << text.str();
  return ctx.finish(failure, check, opt.json ? &doc : nullptr);
}

const RegisterCommand kDerive{{
    "derive",
    "Run every derivation that applies to MODEL's weights on a backend, then tear down",
    [](CLI::App& sub) {
      auto opt = std::make_shared<DeriveOptions>();
      sub.add_option("model", opt->model, "the model: .onnx, .safetensors, a *.safetensors.index.json, or .gguf")->required();
      sub.add_option("--backend", opt->backend, "backend config string, e.g. cpu, vulkan:0, cuda:GPU-<uuid>")
          ->capture_default_str();
      sub.add_option("--dump", opt->dump, "write every derived tensor to DIR as .npy (pairs as two files)");
      add_model_real_dir_option(sub, opt->load);
      add_allow_holes_option(sub, opt->load);
      sub.add_flag("--json", opt->json,
                   "print the report as one JSON document (schema in docs/tools.md); with --comm, one per rank, a line each");
      add_amplification_option(sub, opt->max_amplification,
                               "refuse a plan deriving more than R times the referenced bytes");
      auto* residency = sub.add_option("--residency", opt->residency,
                                       "pin every derivation through a Residency (upload, zero-copy, paged), read it "
                                       "back and hash it (with --dump, also write it: the same files as without)")
                            ->check(CLI::Validator(check_residency, "STRATEGY", "residency strategy"));
      sub.add_option(
             "--budget", opt->budget,
             "device byte budget for --residency: BYTES with an optional K/M/G/T/KiB/MiB/GiB/TiB suffix, or auto")
          ->check(CLI::Validator(check_budget, "BYTES|auto", "byte budget"))
          ->needs(residency);
      sub.add_option(
             "--rules", opt->rules,
             "derivation rules: weight-name patterns -> derivations (JSON; docs/derivations.md, Rules). Without it a "
             "model with no graph (safetensors) is planned by the built-in Hugging Face rules")
          ->type_name("FILE");
      auto* only = sub.add_option("--only", opt->only, "with --residency: only these derivations (KIND[,KIND...])")
                       ->check(CLI::Validator(check_derivation_kinds, "KIND[,KIND...]", "derivation kinds"))
                       ->needs(residency);
      // With --residency, each rank pins its derivations through a
      // Residency over its own shards (rank_model); --only is single-process.
      add_comm_options(sub, opt->comm, "loads its shards cooperatively and derives them")->excludes(only);
      return [opt] { return run_derive(*opt); };
    },
}};

}  // namespace
}  // namespace ballast::cli
