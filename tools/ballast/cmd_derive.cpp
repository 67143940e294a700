// ballast derive MODEL --backend NAME [--dump DIR] [--json]: the main job end
// to end. (With --residency, derive_residency.cpp runs instead: every
// derivation pinned through a Residency, read back, hashed, and with --dump
// written to the same files.) Opens the model, makes its source weights visible to the backend,
// runs every derivation that applies through the model's DerivedWeights memo,
// reports per derivation and what was registered against what the graph
// references, then tears everything down and reports that too (as one JSON
// document with --json; schema in docs/tools.md).
#include "command.hpp"
#include "derive_residency.hpp"
#include "support/budget.hpp"
#include "support/format.hpp"
#include "support/model.hpp"
#include "support/derived_dump.hpp"
#include "support/progress.hpp"
#include "support/terminal.hpp"
#include "support/residency_report.hpp"

#include <ballast/backend_registry.hpp>
#include <ballast/derive.hpp>
#include <ballast/derived_weights.hpp>
#include <ballast/device_weights.hpp>
#include <ballast/model_resource.hpp>
#include <ballast/onnx_loader.hpp>

#include <nlohmann/json.hpp>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <set>
#include <tuple>
#include <sstream>

namespace ballast::cli {
namespace {

struct Options {
  std::string model;
  std::string backend = "cpu";
  std::string dump;
  bool json = false;
  double max_amplification = kDefaultMaxAmplification;
  DeriveResidencyOptions residency;  // used when --residency is given
};

struct KindTotals {
  std::uint64_t count = 0;
  std::uint64_t bytes_read = 0;
  std::uint64_t bytes_written = 0;
  double seconds = 0;
};

class DeriveJob {
 public:
  DeriveJob(Model& model, GpuBackend& gpu, DerivedDump* dump)
      : model_(model), gpu_(gpu), dump_(dump), sources_(gpu, model.store()), host_(gpu), ctx_{gpu, model, sources_, memo_} {
    host_.add(sources_);
    host_.add(memo_);
  }

  int run(const std::vector<PlannedDerivation>& plan) {
    std::uint64_t total = 0;
    for (const auto& p : plan) {
      auto s = derivation_sizes(p.launch);
      if (s.ok()) total += s->src_bytes;
    }
    const std::vector<std::string> stems = dump_stems(plan);
    ProgressBar bar("deriving", total);
    for (std::size_t i = 0; i < plan.size(); ++i) {
      const PlannedDerivation& p = plan[i];
      if (Status s = run_one(p, stems[i]); !s.ok()) {
        failure_ = std::move(s);
        break;
      }
      auto sizes = derivation_sizes(p.launch);
      if (sizes.ok()) bar.advance(sizes->src_bytes);
    }
    return 0;
  }

  void print_report(std::ostream& out) const {
    Table t({"derivation", "count", "read", "written", "time", "GB/s"}, {false, true, true, true, true, true});
    for (int k = 0; k < kDerivationCount; ++k) {
      const KindTotals& kt = totals_[static_cast<std::size_t>(k)];
      if (kt.count == 0) continue;
      char time[32], rate[32];
      std::snprintf(time, sizeof time, "%.3f ms", kt.seconds * 1e3);
      const double gbps = kt.seconds > 0 ? static_cast<double>(kt.bytes_read + kt.bytes_written) / kt.seconds / 1e9 : 0;
      std::snprintf(rate, sizeof rate, "%.2f", gbps);
      t.add({std::string(derivation_name(static_cast<Derivation>(k))), std::to_string(kt.count), human_bytes(kt.bytes_read),
             human_bytes(kt.bytes_written), time, rate});
    }
    out << "derivations on " << gpu_.info().backend << " (" << gpu_.info().name << "):\n";
    t.print(out, "  ");
    const WeightResidency r = sources_.residency();
    out << "source weights: " << r.registered_files << " file(s) registered zero-copy (" << human_bytes(r.registered_bytes)
        << " in " << r.registered_ranges << " range(s); referenced " << human_bytes(r.referenced_bytes) << " of "
        << human_bytes(r.mapped_bytes) << " mapped), " << r.uploaded_weights << " weight(s) uploaded ("
        << human_bytes(r.uploaded_bytes) << ")\n";
    if (r.misaligned_uploads != 0)
      out << r.misaligned_uploads << " weight(s) uploaded because their file offset is not aligned to their element size\n";
    if (r.fallback_files != 0)
      out << "upload fallback for " << r.fallback_files << " file(s): " << r.fallback_reason << "\n";
    const DerivedWeightsStats st = memo_.stats();
    out << "memo: " << memo_.len() << " entries, " << human_bytes(memo_.bytes()) << ", " << st.builds << " builds, "
        << st.hits << " hits\n";
    out << "sharing: " << shared_ << " planned derivation(s) shared an entry (same bytes, same parameters); "
        << distinct_by_parameters_ << " entr" << (distinct_by_parameters_ == 1 ? "y" : "ies")
        << " read bytes another entry of the same derivation reads, kept apart because parameters differ\n";
  }

  nlohmann::ordered_json report_json() const {
    using json = nlohmann::ordered_json;
    json doc;
    doc["model"] = model_.path().string();
    doc["backend"] = gpu_.info().backend;
    doc["device"] = gpu_.info().name;
    json kinds = json::array();
    for (int k = 0; k < kDerivationCount; ++k) {
      const KindTotals& kt = totals_[static_cast<std::size_t>(k)];
      if (kt.count == 0) continue;
      kinds.push_back({{"derivation", std::string(derivation_name(static_cast<Derivation>(k)))},
                       {"count", kt.count},
                       {"bytes_read", kt.bytes_read},
                       {"bytes_written", kt.bytes_written},
                       {"seconds", kt.seconds}});
    }
    doc["derivations"] = std::move(kinds);
    const WeightResidency r = sources_.residency();
    doc["source_weights"] = {{"registered_files", r.registered_files},
                             {"registered_ranges", r.registered_ranges},
                             {"registered_bytes", r.registered_bytes},
                             {"referenced_bytes", r.referenced_bytes},
                             {"mapped_bytes", r.mapped_bytes},
                             {"uploaded_weights", r.uploaded_weights},
                             {"uploaded_bytes", r.uploaded_bytes},
                             {"misaligned_uploads", r.misaligned_uploads},
                             {"fallback_files", r.fallback_files},
                             {"fallback_reason", r.fallback_reason}};
    const DerivedWeightsStats st = memo_.stats();
    doc["memo"] = {{"entries", memo_.len()}, {"bytes", memo_.bytes()}, {"builds", st.builds}, {"hits", st.hits}};
    doc["sharing"] = {{"shared_entries", shared_}, {"distinct_by_parameters", distinct_by_parameters_}};
    return doc;
  }

  const Status& failure() const { return failure_; }
  TeardownReport teardown() { return host_.teardown(gpu_); }

 private:
  Status run_one(const PlannedDerivation& p, const std::string& stem) {
    const auto start = std::chrono::steady_clock::now();
    auto v = derive_weight(ctx_, p);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!v.ok()) return v.error();
    const DerivationKey& k = v->key;
    const int kind = static_cast<int>(p.kind);
    if (!keys_.emplace(kind, std::make_tuple(k.source, k.scales, k.zero_point, k.rows, k.cols, k.block_size,
                                             static_cast<int>(k.src_type), static_cast<int>(k.zero_points)))
             .second) {
      shared_ += 1;
    } else {
      // A new entry on bytes an earlier entry of this derivation reads.
      if (!sources_seen_.emplace(kind, k.source).second) distinct_by_parameters_ += 1;
      DerivationLaunch l = p.launch;
      l.kind = p.kind;
      if (auto sizes = derivation_sizes(l); sizes.ok()) {
        KindTotals& kt = totals_[static_cast<std::size_t>(p.kind)];
        kt.count += 1;
        kt.bytes_read += sizes->src_bytes + sizes->scales_bytes + sizes->zero_point_bytes;
        kt.bytes_written += sizes->dst_bytes + sizes->dst2_bytes;
        kt.seconds += seconds;
      }
    }
    if (dump_ != nullptr)
      return dump_->write(gpu_, p, stem, model_.store().weights.at(p.source).dims, v->first, v->second);
    return Status();
  }

  Model& model_;
  GpuBackend& gpu_;
  DerivedDump* dump_;  // null without --dump
  DeviceWeights sources_;
  DerivedWeights memo_{"derived weights"};
  TeardownHost<GpuBackend> host_;  // declared after what it releases: destroyed (and backstops) first
  DeriveContext ctx_;
  std::array<KindTotals, kDerivationCount> totals_{};
  // (derivation, every key field) and (derivation, source) seen so far:
  // ordered sets, so a model with 10,000 derivations is not a quadratic scan.
  std::set<std::pair<int, std::tuple<DevicePtr, DevicePtr, DevicePtr, std::uint64_t, std::uint64_t, std::uint32_t, int, int>>>
      keys_;
  std::set<std::pair<int, DevicePtr>> sources_seen_;
  std::uint64_t shared_ = 0;
  std::uint64_t distinct_by_parameters_ = 0;
  Status failure_;
};

int run_derive(const Options& opt) {
  if (!opt.residency.residency.empty()) {
    DeriveResidencyOptions r = opt.residency;
    r.model = opt.model;
    r.backend = opt.backend;
    r.json = opt.json;
    r.dump = opt.dump;
    r.max_amplification = opt.max_amplification;
    return run_derive_residency(r);
  }
  auto model = load_onnx(opt.model);
  if (!model.ok()) {
    report_error("derive", model.error());
    return kExitBadInput;
  }
  PlanOptions planning;
  planning.max_amplification = opt.max_amplification;
  auto plan = plan_derivations(*model, planning);
  if (!plan.ok()) {
    report_error("derive", plan.error());
    return kExitBadInput;
  }
  auto gpu = open_backend(opt.backend);
  if (!gpu.ok()) {
    report_error("derive", gpu.error());
    return kExitBadInput;
  }
  std::optional<DerivedDump> dump;
  if (!opt.dump.empty()) {
    auto opened = DerivedDump::open(opt.dump);
    if (!opened.ok()) {
      report_error("derive", opened.error());
      return kExitBadInput;
    }
    dump.emplace(std::move(*opened));
  }
  const AllocationCounters baseline = (*gpu)->counters();
  TeardownReport report;
  Status failure;
  nlohmann::ordered_json doc;
  {
    DeriveJob job(*model, **gpu, dump ? &*dump : nullptr);
    job.run(*plan);
    if (opt.json) doc = job.report_json();
    else job.print_report(std::cout);
    failure = job.failure();
    report = job.teardown();
  }
  const AllocationCounters after = (*gpu)->counters();
  if (opt.json) {
    doc["teardown"] = {{"ok", report.ok()},
                       {"bytes_freed", report.bytes_freed()},
                       {"allocations_freed", report.allocations_freed()},
                       {"failed_resources", report.failed_resources()}};
    doc["device_after_teardown"] = {{"live_allocations", after.live_allocations - baseline.live_allocations},
                                    {"live_registrations", after.live_registrations - baseline.live_registrations}};
    doc["error"] = failure.ok() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(failure.error().to_string());
    std::cout << json_text(doc) << '\n';
  } else {
    std::cout << report.to_string();
    std::cout << "device after teardown: " << after.live_allocations - baseline.live_allocations
              << " live allocation(s), " << after.live_registrations - baseline.live_registrations
              << " live registration(s)\n";
  }
  if (!failure.ok()) {
    report_error("derive", failure.error());
    return kExitBadInput;
  }
  if (!report.ok() || after.live_allocations != baseline.live_allocations ||
      after.live_registrations != baseline.live_registrations) {
    std::cerr << "ballast derive: teardown did not return the device to its baseline\n";
    return kExitVerifyFailed;
  }
  return kExitOk;
}

const RegisterCommand kDerive{{
    "derive",
    "Run every derivation that applies to MODEL's weights on a backend, then tear down",
    [](CLI::App& sub) {
      auto opt = std::make_shared<Options>();
      sub.add_option("model", opt->model, "the .onnx file")->required();
      sub.add_option("--backend", opt->backend, "backend config string, e.g. cpu, vulkan:0, cuda:GPU-<uuid>")
          ->capture_default_str();
      sub.add_option("--dump", opt->dump, "write every derived tensor to DIR as .npy (pairs as two files)");
      sub.add_flag("--json", opt->json, "print the report as one JSON document (schema in docs/tools.md)");
      sub.add_option("--max-amplification", opt->max_amplification,
                     "refuse a plan deriving more than R times the referenced bytes (0: no cap; docs/security.md)")
          ->type_name("R")
          ->check(CLI::NonNegativeNumber)
          ->capture_default_str();
      auto* residency = sub.add_option("--residency", opt->residency.residency,
                                       "pin every derivation through a Residency (upload, zero-copy, paged), read it "
                                       "back and hash it (with --dump, also write it: the same files as without)")
                            ->check(CLI::Validator(check_residency, "STRATEGY", "residency strategy"));
      sub.add_option("--budget", opt->residency.budget,
                     "device byte budget for --residency: BYTES with an optional K/M/G/KiB/MiB/GiB suffix, or auto")
          ->check(CLI::Validator(check_budget, "BYTES|auto", "byte budget"))
          ->needs(residency);
      sub.add_option("--only", opt->residency.only, "with --residency: only these derivations (KIND[,KIND...])")
          ->check(CLI::Validator(check_derivation_kinds, "KIND[,KIND...]", "derivation kinds"))
          ->needs(residency);
      return [opt] { return run_derive(*opt); };
    },
}};

}  // namespace
}  // namespace ballast::cli
