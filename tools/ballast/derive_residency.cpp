// derive --residency: each planned derivation pinned through a Residency
// (built or paged in as that strategy does it), read back whole from the
// device, hashed (SHA-256 of the value, then a pair's second half), and
// unpinned. The digests are the same whatever the strategy and budget: a
// test compares them; the residency summary says what it cost. With --dump,
// each value is also written, while pinned, to the files and names the
// plain derive --dump gives it (support/derived_dump.hpp).
#include "derive_residency.hpp"

#include "command.hpp"
#include "support/format.hpp"
#include "support/derived_dump.hpp"
#include "support/hash.hpp"
#include "support/model.hpp"
#include "support/progress.hpp"
#include "support/terminal.hpp"
#include "support/residency_report.hpp"

#include <ballast/backend_registry.hpp>
#include <ballast/derive.hpp>
#include <ballast/model_resource.hpp>
#include <ballast/onnx_loader.hpp>
#include <ballast/residency.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>
#include <vector>

namespace ballast::cli {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::ordered_json;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

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

// What one planned derivation gave.
struct Value {
  const PlannedDerivation* planned = nullptr;
  std::uint64_t bytes = 0;  // both halves of a pair
  std::string digest;
  double seconds = 0;  // pin, read back, hash
};

// Reads [0, bytes) of `ptr` back in pieces (a multi-GiB value needs no
// multi-GiB host buffer) into the digest.
Status read_back(GpuBackend& gpu, DevicePtr ptr, std::uint64_t bytes, Digester& digest, std::vector<std::byte>& buffer) {
  for (std::uint64_t at = 0; at < bytes;) {
    const std::uint64_t n = std::min<std::uint64_t>(buffer.size(), bytes - at);
    std::span<std::byte> chunk(buffer.data(), static_cast<std::size_t>(n));
    BALLAST_RETURN_IF_ERROR(gpu.copy_to_host(chunk, ptr, at));
    if (!digest.update(chunk)) return make_error(ErrorCode::internal, "SHA-256 failed");
    at += n;
  }
  return Status();
}

class ResidencyDeriveJob {
 public:
  ResidencyDeriveJob(GpuBackend& gpu, Residency& residency, Clock::time_point start, const Model& model,
                     DerivedDump* dump)
      : gpu_(gpu), residency_(residency), start_(start), model_(model), dump_(dump) {}

  // `stems[i]`: the dump file stem of plan[i] (used with --dump only).
  Status run(const std::vector<PlannedDerivation>& plan, const std::vector<std::string>& stems) {
    std::uint64_t total = 0;
    for (const auto& p : plan) {
      auto s = derivation_sizes(p.launch);
      if (s.ok()) total += s->dst_bytes + s->dst2_bytes;
    }
    ProgressBar bar("deriving", total);
    std::vector<std::byte> buffer(std::size_t{8} << 20);
    for (std::size_t i = 0; i < plan.size(); ++i) {
      const PlannedDerivation& p = plan[i];
      const auto t = Clock::now();
      DerivationLaunch l = p.launch;
      l.kind = p.kind;
      BALLAST_ASSIGN_OR_RETURN(DerivationSizes sizes, derivation_sizes(l), "sizing ", derivation_name(p.kind), " of ",
                               p.weight);
      auto pinned = residency_.pin(p);
      if (!pinned.ok())
        return Status(pinned.error()).with_context("pinning " + std::string(derivation_name(p.kind)) + " of " + p.weight);
      if (!first_seconds_) first_seconds_ = seconds_since(start_);
      if (pinned->bytes() != sizes.dst_bytes + sizes.dst2_bytes)
        return make_error(ErrorCode::internal, "pinned " + std::string(derivation_name(p.kind)) + " of " + p.weight +
                                                   " has " + std::to_string(pinned->bytes()) + " bytes, the plan says " +
                                                   std::to_string(sizes.dst_bytes + sizes.dst2_bytes));
      Digester digest(Digest::sha256);
      BALLAST_RETURN_IF_ERROR(read_back(gpu_, pinned->ptr(), sizes.dst_bytes, digest, buffer), "reading back ",
                              derivation_name(p.kind), " of ", p.weight);
      if (derivation_yields_pair(p.kind))
        BALLAST_RETURN_IF_ERROR(read_back(gpu_, pinned->second(), sizes.dst2_bytes, digest, buffer),
                                "reading back the second half of ", derivation_name(p.kind), " of ", p.weight);
      if (dump_ != nullptr)
        BALLAST_RETURN_IF_ERROR(dump_->write(gpu_, p, stems[i], model_.store().weights.at(p.source).dims, pinned->ptr(),
                                             pinned->second()));
      pinned->reset();
      Value v{&p, sizes.dst_bytes + sizes.dst2_bytes, digest.hex_final(), seconds_since(t)};
      bar.advance(v.bytes);
      values_.push_back(std::move(v));
    }
    all_seconds_ = seconds_since(start_);
    return Status();
  }

  void print(std::ostream& out, const ResidencyStats& stats) const {
    Table t({"derivation", "count", "bytes", "time"}, {false, true, true, true});
    for (int k = 0; k < kDerivationCount; ++k) {
      const auto [count, bytes, seconds] = kind_totals(static_cast<Derivation>(k));
      if (count == 0) continue;
      char time[32];
      std::snprintf(time, sizeof time, "%.3f ms", seconds * 1e3);
      t.add({std::string(derivation_name(static_cast<Derivation>(k))), std::to_string(count), human_bytes(bytes), time});
    }
    out << "derivations on " << gpu_.info().backend << " (" << gpu_.info().name << ") through residency "
        << residency_strategy_name(stats.strategy) << ", each pinned, read back whole and hashed:\n";
    t.print(out, "  ");
    out << "residency:\n";
    print_residency_summary(out, stats);
    char line[160];
    std::snprintf(line, sizeof line, "time to first derivation %.3f ms, to all %zu: %.3f ms; peak RSS %s\n",
                  first_seconds_.value_or(0) * 1e3, values_.size(), all_seconds_ * 1e3,
                  human_bytes(peak_rss_bytes()).c_str());
    out << line;
  }

  json to_json(const ResidencyStats& stats) const {
    json kinds = json::array();
    for (int k = 0; k < kDerivationCount; ++k) {
      const auto [count, bytes, seconds] = kind_totals(static_cast<Derivation>(k));
      if (count == 0) continue;
      kinds.push_back({{"derivation", std::string(derivation_name(static_cast<Derivation>(k)))},
                       {"count", count},
                       {"bytes", bytes},
                       {"seconds", seconds}});
    }
    json values = json::array();
    for (const Value& v : values_) {
      values.push_back({{"derivation", std::string(derivation_name(v.planned->kind))},
                        {"weight", v.planned->weight},
                        {"node", v.planned->node},
                        {"bytes", v.bytes},
                        {"digest", v.digest}});
    }
    json doc;
    doc["derivations"] = std::move(kinds);
    doc["values"] = std::move(values);
    doc["residency"] = residency_stats_json(stats);
    doc["time_to_first_derivation_seconds"] = first_seconds_ ? json(*first_seconds_) : json(nullptr);
    doc["time_to_all_derivations_seconds"] = all_seconds_;
    doc["peak_rss_bytes"] = peak_rss_bytes();
    return doc;
  }

 private:
  std::tuple<std::uint64_t, std::uint64_t, double> kind_totals(Derivation kind) const {
    std::uint64_t count = 0, bytes = 0;
    double seconds = 0;
    for (const Value& v : values_) {
      if (v.planned->kind != kind) continue;
      count += 1;
      bytes += v.bytes;
      seconds += v.seconds;
    }
    return {count, bytes, seconds};
  }

  GpuBackend& gpu_;
  Residency& residency_;
  Clock::time_point start_;
  const Model& model_;
  DerivedDump* dump_;  // null without --dump
  std::vector<Value> values_;
  std::optional<double> first_seconds_;
  double all_seconds_ = 0;
};

}  // namespace

std::string check_derivation_kinds(const std::string& text) {
  for (std::string_view name : split_commas(text)) {
    if (!derivation_named(name))
      return "unknown derivation '" + std::string(name) +
             "' (expected transpose, to_f16, dequant_int4, repack_int4 or quant_int8, comma-separated)";
  }
  return {};
}

int run_derive_residency(const DeriveResidencyOptions& opt) {
  const auto start = Clock::now();  // time to first derivation counts opening the model and the backend
  auto options = residency_options(opt.residency, opt.budget);
  if (!options.ok()) {
    report_error("derive", options.error());
    return kExitBadInput;
  }
  auto model = load_onnx(opt.model);
  if (!model.ok()) {
    report_error("derive", model.error());
    return kExitBadInput;
  }
  PlanOptions planning;
  planning.max_amplification = opt.max_amplification;
  options->max_amplification = opt.max_amplification;
  auto plan = plan_derivations(*model, planning);
  if (!plan.ok()) {
    report_error("derive", plan.error());
    return kExitBadInput;
  }
  if (!opt.only.empty()) {
    std::array<bool, kDerivationCount> keep{};
    for (std::string_view name : split_commas(opt.only)) {
      if (auto k = derivation_named(name)) keep[static_cast<std::size_t>(*k)] = true;
    }
    std::erase_if(*plan, [&](const PlannedDerivation& p) { return !keep[static_cast<std::size_t>(p.kind)]; });
    options->derivations = *plan;  // auto (and the largest-entry check) counts only what this run pins
  }
  // A stem depends on the entries of its own weight and kind only, which
  // --only keeps or drops together: the names are the whole plan's.
  const std::vector<std::string> stems = dump_stems(*plan);
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
  TeardownCheck check;
  check.baseline = (*gpu)->counters();
  Status failure;
  json doc;
  std::ostringstream text;
  {
    auto residency = Residency::create(**gpu, *model, *options);
    if (!residency.ok()) {
      report_error("derive", Error(residency.error()).with_context("creating the residency"));
      return kExitBadInput;
    }
    TeardownHost<GpuBackend> host(**gpu);
    host.add(**residency);
    ResidencyDeriveJob job(**gpu, **residency, start, *model, dump ? &*dump : nullptr);
    failure = job.run(*plan, stems);
    const ResidencyStats stats = (*residency)->stats();
    if (opt.json) {
      doc["model"] = model->path().string();
      doc["backend"] = (*gpu)->info().backend;
      doc["device"] = (*gpu)->info().name;
      doc.update(job.to_json(stats));
    } else {
      job.print(text, stats);
    }
    check.report = host.teardown(**gpu);
  }
  check.after = (*gpu)->counters();
  if (opt.json) {
    add_teardown_json(doc, check);
    doc["error"] = failure.ok() ? json(nullptr) : json(failure.error().to_string());
    std::cout << json_text(doc) << '\n';
  } else {
    std::cout << text.str();
    print_teardown(std::cout, check);
  }
  if (!failure.ok()) {
    report_error("derive", failure.error());
    return kExitBadInput;
  }
  if (!check.back_to_baseline()) {
    std::cerr << "ballast derive: teardown did not return the device to its baseline\n";
    return kExitVerifyFailed;
  }
  return kExitOk;
}

}  // namespace ballast::cli
