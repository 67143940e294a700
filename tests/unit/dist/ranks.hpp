// What the rank tests share: every rank's shards taken on its own thread
// (the load, or in place) with their rows' maxima shared, and one rank
// model's derivations pinned through Residency on every strategy, each
// checked against the values a direct path gave.
#pragma once

#include <ballast/cooperative_load.hpp>
#include <ballast/gpu_backend.hpp>
#include <ballast/residency.hpp>

#include <doctest/doctest.h>

#include <optional>
#include <thread>
#include <vector>

namespace ballast::testing {

inline std::vector<std::byte> read_back(GpuBackend& gpu, DevicePtr at, std::uint64_t bytes) {
  std::vector<std::byte> out(bytes);
  REQUIRE(gpu.copy_to_host(out, at, 0).ok());
  return out;
}

// Every rank's shards by `take(rank, its communicator)`, each rank a
// thread, then (with a plan) their rows' maxima shared.
template <class Take>
std::vector<RankShards> take_all(const Model& m, const ShardPlans& plans, std::span<const PlannedDerivation> plan,
                                 Take take) {
  const auto world = static_cast<std::uint32_t>(plans.ranks.size());
  auto comms = make_local_communicators(world);
  REQUIRE(comms.ok());
  std::vector<std::optional<Result<RankShards>>> got(world);
  std::vector<Status> shared(world);
  std::vector<std::thread> threads;
  for (std::uint32_t r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      got[r] = take(r, *(*comms)[r]);
      if (got[r]->ok() && !plan.empty())
        shared[r] = share_row_maxima(m, plans.ranks[r], **got[r], plan, *(*comms)[r]);
    });
  for (std::thread& t : threads) t.join();
  std::vector<RankShards> out;
  for (std::uint32_t r = 0; r < world; ++r) {
    REQUIRE_MESSAGE(got[r]->ok(), got[r]->error().to_string());
    REQUIRE_MESSAGE(shared[r].ok(), shared[r].error().to_string());
    out.push_back(std::move(**got[r]));
  }
  return out;
}

// The cooperative load's shards of every rank.
inline std::vector<RankShards> load_all(const Model& m, const ShardPlans& plans, const CooperativeLoadPlan& load,
                                        std::span<const PlannedDerivation> plan = {}) {
  return take_all(m, plans, plan, [&](std::uint32_t, Communicator& c) { return cooperative_load(m, plans, load, c); });
}

// A value and, for a pair, its second half after it.
inline std::vector<std::byte> read_pair(GpuBackend& gpu, DevicePtr first, std::uint64_t first_bytes, DevicePtr second,
                                        std::uint64_t second_bytes) {
  std::vector<std::byte> bytes = read_back(gpu, first, first_bytes);
  if (second_bytes > 0) {
    const auto tail = read_back(gpu, second, second_bytes);
    bytes.insert(bytes.end(), tail.begin(), tail.end());
  }
  return bytes;
}

// Every derivation of `ranked` pinned under upload, zero_copy, paged at
// the auto budget and at a third of it (which evicts): each equals
// want[i]. `check` sees each strategy's stats.
template <class Check>
void pin_on_every_strategy(GpuBackend& gpu, const RankModel& ranked, const std::vector<std::vector<std::byte>>& want,
                           Check check) {
  REQUIRE(ranked.derivations.size() == want.size());
  auto every = auto_budget(ranked.model.store(), ranked.derivations);
  REQUIRE(every.ok());
  struct Case {
    const char* name;
    ResidencyStrategy strategy;
    std::optional<std::uint64_t> budget;
  };
  for (const Case& c : {Case{"upload", ResidencyStrategy::upload, std::nullopt},
                        Case{"zero_copy", ResidencyStrategy::zero_copy, std::nullopt},
                        Case{"paged auto", ResidencyStrategy::paged, std::nullopt},
                        Case{"paged tight", ResidencyStrategy::paged, every->total / 3}}) {
    CAPTURE(c.name);
    ResidencyOptions o;
    o.strategy = c.strategy;
    o.budget_bytes = c.budget;
    o.derivations = ranked.derivations;
    auto res = Residency::create(gpu, ranked.model, o);
    REQUIRE_MESSAGE(res.ok(), res.error().to_string());
    if (c.strategy == ResidencyStrategy::paged && !c.budget) CHECK((*res)->budget() == every->total);
    for (std::size_t i = 0; i < ranked.derivations.size(); ++i) {
      CAPTURE(i);
      auto pinned = (*res)->pin(ranked.derivations[i]);
      REQUIRE_MESSAGE(pinned.ok(), pinned.error().to_string());
      CHECK(read_pair(gpu, pinned->first(), pinned->first_bytes(), pinned->second(), pinned->second_bytes()) == want[i]);
    }
    const ResidencyStats stats = (*res)->stats();
    CHECK(stats.peak_device_bytes <= stats.budget_bytes);
    if (c.budget) CHECK(stats.derived_evictions + stats.source_evictions > 0);
    check(c.strategy, stats);
    REQUIRE((*res)->release(gpu).status.ok());
  }
}

}  // namespace ballast::testing
