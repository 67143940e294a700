// Running out of host memory inside a pin: every allocation of pin() (a
// fresh source, a fresh derivation built from it) is made to fail in turn.
// Each failing run ends in an error (never an exception, never a crash); after
// it the same object pins everything right and release() frees every
// device allocation it made (an entry filed in one index but not the other
// would stay on the device). The same for each allocation of a cold
// load() in turn. This binary replaces the global operator new,
// so it is a test of its own.
#include "support/thread_failing_new.hpp"

#include <ballast/backend_registry.hpp>
#include <ballast/derive.hpp>
#include <ballast/residency.hpp>

#include "support/orphaned_prefix_model.hpp"
#include "support/inline_matmul_model.hpp"
#include "unit/onnx/load_helpers.hpp"
#include "unit/store/scratch_dir.hpp"

#include <ballast/onnx_loader.hpp>

#include <algorithm>
#include <fstream>
#include <new>
#include <span>
#include <string>
#include <vector>

using namespace ballast;
using namespace ballast::testing;

namespace {

// For each strategy, `step` on a fresh residency of `m` with its nth
// allocation on this thread failing, n = 0, 1, ... until a run in which
// none failed. After each, `whole` finds the residency whole (whatever
// failed), and release() gives back every device allocation. No
// exception leaves the call; more than 5 runs failed.
template <class Step, class Whole>
void each_allocation_failing(GpuBackend& gpu, const Model& m, const std::vector<PlannedDerivation>& plan,
                             const char* what, Step step, Whole whole) {
  for (ResidencyStrategy strategy :
       {ResidencyStrategy::upload, ResidencyStrategy::zero_copy, ResidencyStrategy::paged}) {
    CAPTURE(residency_strategy_name(strategy));
    const std::uint64_t live_before = gpu.counters().live_allocations;
    const std::uint64_t registrations_before = gpu.counters().live_registrations;
    int runs_failed = 0;
    for (long n = 0; n < 100000; ++n) {
      CAPTURE(n);
      ResidencyOptions o;
      o.strategy = strategy;
      o.derivations = plan;
      auto r = Residency::create(gpu, m, o);
      REQUIRE(r.ok());
      Residency& residency = **r;
      t_failed = false;
      t_allocations_left = n;
      bool threw = false;
      try {
        step(residency);
      } catch (const std::bad_alloc&) {
        threw = true;
      }
      t_allocations_left = -1;
      const bool failed = t_failed;
      CHECK_FALSE(threw);  // never an exception across the API: out_of_memory, or nothing said (a prefetch)
      whole(residency);
      const Released out = residency.release(gpu);
      CHECK(out.status.ok());
      CHECK(gpu.counters().live_allocations == live_before);
      CHECK(gpu.counters().live_registrations == registrations_before);  // zero_copy: none ended by no one
      if (!failed) break;
      ++runs_failed;
    }
    MESSAGE(runs_failed << " " << std::string(what) << " with an allocation failed");
    CHECK(runs_failed > 5);
  }
}

}  // namespace

TEST_CASE("each allocation of a pin failing in turn leaves the residency whole: right values, nothing leaked") {
  const Model m = test_models::inline_matmul_model();
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  auto plan = plan_derivations(m);
  REQUIRE(plan.ok());
  REQUIRE_FALSE(plan->empty());
  const PlannedDerivation derived = plan->front();
  const ValueId weight = *m.value_id("q.weight");
  each_allocation_failing(
      **gpu, m, *plan, "runs",
      [&](Residency& residency) {
        auto a = residency.pin(derived);  // builds its source's entry too
        if (a.ok()) a->reset();
        auto b = residency.pin(weight);
        if (b.ok()) b->reset();
      },
      [&](Residency& residency) {  // both pin, and right
        auto a = residency.pin(derived);
        REQUIRE_MESSAGE(a.ok(), a.error().to_string());
        auto b = residency.pin(weight);
        REQUIRE_MESSAGE(b.ok(), b.error().to_string());
        CHECK(b->first_bytes() == 8 * 16 * 4);
      });
}

// prefetch() returns nothing: a job that cannot be queued is a failed
// prefetch, counted, never an exception; set_budget() says out_of_memory.
TEST_CASE("each allocation of prefetch() and set_budget() failing in turn: no exception, the residency whole") {
  const Model m = test_models::inline_matmul_model();
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  auto plan = plan_derivations(m);
  REQUIRE(plan.ok());
  const ValueId weights[] = {*m.value_id("q.weight"), *m.value_id("o.weight")};
  each_allocation_failing(
      **gpu, m, *plan, "runs",
      [&](Residency& residency) {
        residency.prefetch(std::span<const PlannedDerivation>(*plan));
        residency.prefetch(std::span<const ValueId>(weights));
        residency.wait_for_prefetches();
        (void)residency.set_budget(residency.budget() == kUnlimitedBudget ? 1 << 20 : residency.budget());
      },
      [&](Residency& residency) {  // every value pins, and is right
        for (const PlannedDerivation& d : *plan) {
          auto p = residency.pin(d);
          REQUIRE_MESSAGE(p.ok(), p.error().to_string());
        }
        for (ValueId id : weights) {
          auto p = residency.pin(id);
          REQUIRE_MESSAGE(p.ok(), p.error().to_string());
        }
      });
}

// A load() that runs out of host memory after it marked its sources
// loading must abandon them as an error does: left loading, every later
// pin of one waited for good.
TEST_CASE("each allocation of a cold load failing in turn leaves nothing loading: every value pins after it") {
  using test_models::OrphanedPrefixModel;
  ScratchDir dir("residency-load-alloc-failure");
  const auto files = OrphanedPrefixModel::write(dir.path());
  auto loaded = load_onnx(files.onnx);
  REQUIRE_MESSAGE(loaded.ok(), loaded.error().to_string());
  const Model& m = *loaded;
  std::vector<std::byte> data(OrphanedPrefixModel::kFileBytes);
  std::ifstream(files.data, std::ios::binary)
      .read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(data.size()));
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  auto plan = plan_derivations(m);
  REQUIRE(plan.ok());
  ResidencyLoadOptions lo;
  lo.read_cached = true;  // the file was just written: read it anyway
  each_allocation_failing(
      **gpu, m, *plan, "loads", [&](Residency& residency) { (void)residency.load(lo); },
      [&](Residency& residency) {  // every value pins (none waits on a load that is gone), and is right
        for (const PlannedDerivation& d : *plan) {
          auto p = residency.pin(d);
          REQUIRE_MESSAGE(p.ok(), p.error().to_string());
        }
        for (const auto& [name, offset] :
             {std::pair{"w0", OrphanedPrefixModel::kW0Offset}, std::pair{"w1", OrphanedPrefixModel::kW1Offset},
              std::pair{"w2", OrphanedPrefixModel::kW2Offset}}) {
          auto p = residency.pin(*m.value_id(name));
          REQUIRE_MESSAGE(p.ok(), p.error().to_string());
          std::vector<std::byte> back(p->first_bytes());
          REQUIRE((*gpu)->copy_to_host(back, p->first(), 0).ok());
          CHECK(std::equal(back.begin(), back.end(), data.begin() + static_cast<std::ptrdiff_t>(offset)));
        }
      });
}

// The pins of a model whose weights live in a data file (registered in
// place by zero_copy, paged in or uploaded from the mapping by the others),
// with each allocation failing in turn: no registration or device block
// left live, every value pins and reads right afterwards.
TEST_CASE("each allocation of the pins of a file-backed model failing in turn leaves the residency whole") {
  using test_models::OrphanedPrefixModel;
  ScratchDir dir("residency-pin-alloc-failure");
  const auto files = OrphanedPrefixModel::write(dir.path());
  auto loaded = load_onnx(files.onnx);
  REQUIRE_MESSAGE(loaded.ok(), loaded.error().to_string());
  const Model& m = *loaded;
  std::vector<std::byte> data(OrphanedPrefixModel::kFileBytes);
  std::ifstream(files.data, std::ios::binary)
      .read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(data.size()));
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  auto plan = plan_derivations(m);
  REQUIRE(plan.ok());
  auto pin_all = [&](Residency& residency, bool must) {
    for (const PlannedDerivation& d : *plan) {
      auto p = residency.pin(d);
      if (must) REQUIRE_MESSAGE(p.ok(), p.error().to_string());
    }
    for (const auto& [name, offset] :
         {std::pair{"w0", OrphanedPrefixModel::kW0Offset}, std::pair{"w1", OrphanedPrefixModel::kW1Offset},
          std::pair{"w2", OrphanedPrefixModel::kW2Offset}}) {
      auto p = residency.pin(*m.value_id(name));
      if (!must) continue;
      REQUIRE_MESSAGE(p.ok(), p.error().to_string());
      std::vector<std::byte> back(p->first_bytes());
      REQUIRE((*gpu)->copy_to_host(back, p->first(), 0).ok());
      CHECK(std::equal(back.begin(), back.end(), data.begin() + static_cast<std::ptrdiff_t>(offset)));
    }
  };
  each_allocation_failing(
      **gpu, m, *plan, "runs", [&](Residency& residency) { pin_all(residency, false); },
      [&](Residency& residency) { pin_all(residency, true); });
}
