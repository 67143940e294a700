// derive's memo strategy (derive_strategy.hpp), the plain `ballast derive`:
// each planned derivation through derive_weight and the model's
// DerivedWeights memo, so that derivations on the same bytes with the same
// parameters share one entry. Reports per kind the count, bytes read and
// written, time and GB/s; how the source weights reached the device
// (zero-copy or upload, and why); the memo's size; and how many planned
// derivations shared an entry or were kept apart by their parameters.
#include "derive_strategy.hpp"

#include "support/format.hpp"
#include "support/progress.hpp"

#include <ballast/derived_weights.hpp>
#include <ballast/device_weights.hpp>

#include <array>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <set>
#include <tuple>

namespace ballast::cli {
namespace {

struct KindTotals {
  std::uint64_t count = 0;
  std::uint64_t bytes_read = 0;
  std::uint64_t bytes_written = 0;
  double seconds = 0;
};

class MemoStrategy final : public DeriveStrategy {
 public:
  MemoStrategy(Model& model, GpuBackend& gpu, DerivedDump* dump)
      : model_(model), gpu_(gpu), dump_(dump), sources_(gpu, model.store()), host_(gpu), ctx_{gpu, model, sources_, memo_} {
    host_.add(sources_);
    host_.add(memo_);
  }

  Status run(std::span<const PlannedDerivation> plan, std::span<const std::string> stems) override {
    std::uint64_t total = 0;
    for (const auto& p : plan) {
      auto s = derivation_sizes(p.launch);
      if (s.ok()) total += s->src_bytes;
    }
    ProgressBar bar("deriving", total);
    for (std::size_t i = 0; i < plan.size(); ++i) {
      const PlannedDerivation& p = plan[i];
      BALLAST_RETURN_IF_ERROR(run_one(p, stems[i]));
      auto sizes = derivation_sizes(p.launch);
      if (sizes.ok()) bar.advance(sizes->src_bytes);
    }
    return Status();
  }

  void print(std::ostream& out) const override {
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

  nlohmann::ordered_json to_json() const override {
    using json = nlohmann::ordered_json;
    json doc;
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

  TeardownReport teardown() override { return host_.teardown(gpu_); }

 private:
  Status run_one(const PlannedDerivation& p, const std::string& stem) {
    const auto start = std::chrono::steady_clock::now();
    auto v = derive_weight(ctx_, p);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!v.ok()) return v.error();
    const DerivationKey& k = v->key;
    const int kind = static_cast<int>(p.kind());
    // Every field of the memo's key (DerivationKey): the report's "shared"
    // must be the memo's own sharing.
    if (!keys_
             .emplace(kind, std::make_tuple(k.source, k.scales, k.zero_point, k.rows, k.cols, k.block_size,
                                            static_cast<int>(k.src_type), static_cast<int>(k.zero_points), k.src_cols,
                                            k.col_offset))
             .second) {
      shared_ += 1;
    } else {
      // A new entry on bytes an earlier entry of this derivation reads.
      if (!sources_seen_.emplace(kind, k.source).second) distinct_by_parameters_ += 1;
      DerivationLaunch l = p.launch;
      if (auto sizes = derivation_sizes(l); sizes.ok()) {
        KindTotals& kt = totals_[static_cast<std::size_t>(p.kind())];
        kt.count += 1;
        kt.bytes_read += sizes->src_bytes + sizes->scales_bytes + sizes->zero_point_bytes;
        kt.bytes_written += sizes->dst_bytes + sizes->dst2_bytes;
        kt.seconds += seconds;
      }
    }
    if (dump_ != nullptr)
      return dump_->write(gpu_, p, stem, model_.store().weights().at(p.source).dims, v->first, v->second);
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
  std::set<std::pair<int, std::tuple<DevicePtr, DevicePtr, DevicePtr, std::uint64_t, std::uint64_t, std::uint32_t, int,
                                     int, std::uint64_t, std::uint64_t>>>
      keys_;
  std::set<std::pair<int, DevicePtr>> sources_seen_;
  std::uint64_t shared_ = 0;
  std::uint64_t distinct_by_parameters_ = 0;
};

}  // namespace

std::unique_ptr<DeriveStrategy> memo_strategy(Model& model, GpuBackend& gpu, DerivedDump* dump) {
  return std::make_unique<MemoStrategy>(model, gpu, dump);
}

}  // namespace ballast::cli
