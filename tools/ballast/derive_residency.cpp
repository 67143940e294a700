// derive's residency strategy (derive_strategy.hpp), `ballast derive
// --residency S`: each planned derivation pinned through a Residency (built
// or paged in as that strategy does it), read back whole from the device,
// hashed (SHA-256 of the value, then a pair's second half), and unpinned.
// The digests are the same whatever the strategy and budget: a test
// compares them; the residency summary says what it cost. With --dump, each
// value is also written, while pinned, to the files and names the memo
// strategy gives it (support/derived_dump.hpp).
#include "derive_strategy.hpp"

#include "support/format.hpp"
#include "support/derived_dump.hpp"
#include "support/hash.hpp"
#include "support/progress.hpp"
#include "support/residency_report.hpp"

#include <ballast/derive.hpp>
#include <ballast/model_resource.hpp>
#include <ballast/residency.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <vector>

namespace ballast::cli {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::ordered_json;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

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

class ResidencyStrategy final : public DeriveStrategy {
 public:
  ResidencyStrategy(GpuBackend& gpu, std::unique_ptr<Residency> residency, Clock::time_point start, const Model& model,
                    DerivedDump* dump)
      : gpu_(gpu), residency_(std::move(residency)), host_(gpu), start_(start), model_(model), dump_(dump) {
    host_.add(*residency_);
  }

  Status run(std::span<const PlannedDerivation> plan, std::span<const std::string> stems) override {
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
      BALLAST_ASSIGN_OR_RETURN(DerivationSizes sizes, derivation_sizes(l), "sizing ", derivation_name(p.kind()), " of ",
                               p.weight);
      auto pinned = residency_->pin(p);
      if (!pinned.ok())
        return Status(pinned.error())
            .with_context("pinning " + std::string(derivation_name(p.kind())) + " of " + p.weight);
      if (!first_seconds_) first_seconds_ = seconds_since(start_);
      if (pinned->bytes() != sizes.dst_bytes + sizes.dst2_bytes)
        return make_error(ErrorCode::internal, "pinned " + std::string(derivation_name(p.kind())) + " of " + p.weight +
                                                   " has " + std::to_string(pinned->bytes()) +
                                                   " bytes, the plan says " +
                                                   std::to_string(sizes.dst_bytes + sizes.dst2_bytes));
      Digester digest(Digest::sha256);
      BALLAST_RETURN_IF_ERROR(read_back(gpu_, pinned->first(), sizes.dst_bytes, digest, buffer), "reading back ",
                              derivation_name(p.kind()), " of ", p.weight);
      if (derivation_yields_pair(p.kind()))
        BALLAST_RETURN_IF_ERROR(read_back(gpu_, pinned->second(), sizes.dst2_bytes, digest, buffer),
                                "reading back the second half of ", derivation_name(p.kind()), " of ", p.weight);
      if (dump_ != nullptr)
        BALLAST_RETURN_IF_ERROR(dump_->write(gpu_, p, stems[i], model_.store().weights().at(p.source).dims,
                                             pinned->first(), pinned->second()));
      pinned->reset();
      Value v{&p, sizes.dst_bytes + sizes.dst2_bytes, digest.hex_final(), seconds_since(t)};
      bar.advance(v.bytes);
      values_.push_back(std::move(v));
    }
    all_seconds_ = seconds_since(start_);
    return Status();
  }

  void print(std::ostream& out) const override {
    const ResidencyStats stats = residency_->stats();
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
    // Nothing pinned (an empty plan): no first derivation to time, as the
    // JSON's null says; 0 ms would read as a measurement.
    char first[32] = "none (nothing derived)";
    if (first_seconds_) std::snprintf(first, sizeof first, "%.3f ms", *first_seconds_ * 1e3);
    char line[192];
    std::snprintf(line, sizeof line, "time to first derivation %s, to all %zu: %.3f ms; peak RSS %s\n", first,
                  values_.size(), all_seconds_ * 1e3, human_bytes(peak_rss_bytes()).c_str());
    out << line;
  }

  json to_json() const override {
    const ResidencyStats stats = residency_->stats();
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
      values.push_back({{"derivation", std::string(derivation_name(v.planned->kind()))},
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

  TeardownReport teardown() override { return host_.teardown(gpu_); }

 private:
  std::tuple<std::uint64_t, std::uint64_t, double> kind_totals(Derivation kind) const {
    std::uint64_t count = 0, bytes = 0;
    double seconds = 0;
    for (const Value& v : values_) {
      if (v.planned->kind() != kind) continue;
      count += 1;
      bytes += v.bytes;
      seconds += v.seconds;
    }
    return {count, bytes, seconds};
  }

  GpuBackend& gpu_;
  std::unique_ptr<Residency> residency_;
  TeardownHost<GpuBackend> host_;  // declared after what it releases: destroyed (and backstops) first
  Clock::time_point start_;
  const Model& model_;
  DerivedDump* dump_;  // null without --dump
  std::vector<Value> values_;
  std::optional<double> first_seconds_;
  double all_seconds_ = 0;
};

}  // namespace

Result<std::unique_ptr<DeriveStrategy>> residency_strategy(Model& model, GpuBackend& gpu, const ResidencyOptions& options,
                                                           Clock::time_point start, DerivedDump* dump) {
  auto residency = create_residency(gpu, model, options);
  if (!residency.ok()) return residency.error();
  return std::unique_ptr<DeriveStrategy>(
      std::make_unique<ResidencyStrategy>(gpu, std::move(*residency), start, model, dump));
}

}  // namespace ballast::cli
