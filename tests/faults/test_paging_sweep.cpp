// Paged (and uploaded) residency under a device fault at every call.
//
// One scenario, what an engine's decode loop does: a Residency on the
// sample model (every derivation kind), paged under a budget about half of
// auto so that entries are evicted and rebuilt, pins every planned
// derivation in two rounds and reads each value back, then releases. It
// runs once clean through a FaultInjectingBackend that counts the calls of
// each operation, then once for every N, for each operation, with the Nth
// call failing once.
//
// Every faulted run must:
//   - fail at most the one pin or read-back the fault hit (an allocation
//     the device refuses as out_of_memory may instead be retried after an
//     eviction, and succeed), with an error
//     naming the operation, carrying the injected error and naming the
//     weight; the same pin or read, tried again, succeeds: a failed page-in
//     or build leaves nothing half-built behind;
//   - produce values byte-identical to the clean run's;
//   - for a refused free (an eviction or the release): never an error to
//     a pin; an eviction's refused free is retried by release(), a
//     release's is reported (named, counted);
//   - end with the backend's counters at their baseline once what release
//     could not free is freed; finish under the watchdog.
#include "support/text.hpp"
#include "faults/fault_sweep.hpp"
#include "support/fault_injecting_backend.hpp"

#include <ballast/derive.hpp>
#include <ballast/derived_weights.hpp>
#include <ballast/device_weights.hpp>
#include <ballast/onnx_loader.hpp>
#include <ballast/residency.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

using namespace ballast;
using namespace ballast::testing;
using ballast::faults::backend;

namespace {

using ballast::testing::contains;

struct PagedRun {
  std::vector<Status> failures;                // every pin or read that failed (then retried)
  std::vector<std::vector<std::byte>> values;  // every value read back, in order, both rounds
  Released released;
  Status retry;  // the first retry that failed too (must stay ok)
};

Result<std::vector<std::byte>> read(GpuBackend& gpu, const Pinned& p, const PlannedDerivation& d) {
  DerivationLaunch l = d.launch;
  BALLAST_ASSIGN_OR_RETURN(auto sizes, derivation_sizes(l));
  std::vector<std::byte> out(sizes.dst_bytes + sizes.dst2_bytes);
  const std::span<std::byte> all(out);
  BALLAST_RETURN_IF_ERROR(gpu.copy_to_host(all.first(sizes.dst_bytes), p.first(), 0),
                          "reading back " + std::string(derivation_name(d.kind())) + " of '" + d.weight + "'");
  if (sizes.dst2_bytes != 0)
    BALLAST_RETURN_IF_ERROR(gpu.copy_to_host(all.subspan(sizes.dst_bytes), p.second(), 0),
                            "reading back " + std::string(derivation_name(d.kind())) + " of '" + d.weight + "'");
  return out;
}

PagedRun run_paged(GpuBackend& gpu, const Model& model, const std::vector<PlannedDerivation>& plan,
                   const ResidencyOptions& options) {
  PagedRun out;
  auto r = Residency::create(gpu, model, options);
  REQUIRE_MESSAGE(r.ok(), r.status().to_string());
  Residency& residency = **r;
  for (int round = 0; round < 2; ++round) {
    for (const PlannedDerivation& d : plan) {
      Result<std::vector<std::byte>> value = make_error(ErrorCode::internal, "not read");
      for (int attempt = 0; attempt < 2; ++attempt) {
        auto p = residency.pin(d);
        value = p.ok() ? read(gpu, *p, d) : Result<std::vector<std::byte>>(p.status());
        if (value.ok()) break;
        if (attempt == 0) out.failures.push_back(value.status());
        else if (out.retry.ok()) out.retry = value.status();
      }
      if (value.ok()) out.values.push_back(std::move(*value));
    }
  }
  out.released = residency.release(gpu);
  return out;
}

}  // namespace

TEST_CASE("paged residency: a device fault at every call leaves nothing half-built and nothing leaked") {
  auto model = load_onnx(ballast::faults::model_dir() / "sample.onnx");
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  auto plan = plan_derivations(*model);
  REQUIRE(plan.ok());
  auto full = auto_budget(*model);
  REQUIRE(full.ok());

  GpuBackend& inner = backend();
  FaultInjectingBackend gpu(inner);
  const std::string prefix = inner.info().backend + ": ";
  const AllocationCounters baseline = gpu.counters();
  auto& dog = ballast::faults::watchdog();

  for (ResidencyStrategy strategy : {ResidencyStrategy::paged, ResidencyStrategy::upload}) {
    ResidencyOptions options;
    options.strategy = strategy;
    if (strategy == ResidencyStrategy::paged) {
      // About half of auto, or the least create() accepts.
      for (std::uint64_t b = full->total / 2; b <= full->total; b += full->total / 20) {
        options.budget_bytes = b;
        if (Residency::create(inner, *model, options).ok()) break;
      }
    }
    gpu.reset_counts();
    dog.arm(std::string("the clean ") + std::string(residency_strategy_name(strategy)) + " run", std::chrono::seconds(60));
    const PagedRun clean = run_paged(gpu, *model, *plan, options);
    dog.disarm();
    REQUIRE(clean.failures.empty());
    REQUIRE_MESSAGE(clean.released.status.ok(), clean.released.status.to_string());
    REQUIRE(clean.values.size() == 2 * plan->size());
    REQUIRE(gpu.counters().live_allocations == baseline.live_allocations);
    {
      // The clean run's values are derive_weights()' (every kind, int4 included).
      DeviceWeights sources(inner, model->store());
      DerivedWeights memo;
      auto values = derive_weights(DeriveContext{inner, *model, sources, memo}, *plan);
      REQUIRE(values.ok());
      for (std::size_t i = 0; i < plan->size(); ++i) {
        DerivationLaunch l = (*plan)[i].launch;
        auto sizes = derivation_sizes(l);
        REQUIRE(sizes.ok());
        std::vector<std::byte> bytes(sizes->dst_bytes + sizes->dst2_bytes);
        REQUIRE(inner.copy_to_host(std::span(bytes).first(sizes->dst_bytes), (*values)[i].first, 0).ok());
        if (sizes->dst2_bytes != 0)
          REQUIRE(inner.copy_to_host(std::span(bytes).subspan(sizes->dst_bytes), (*values)[i].second, 0).ok());
        CHECK_MESSAGE(ballast::faults::same_bytes(bytes, clean.values[i]), derivation_name((*plan)[i].kind())
                                                                               << " of " << (*plan)[i].weight);
      }
      CHECK(memo.release(inner).status.ok());
      CHECK(sources.release(inner).status.ok());
    }
    std::map<FaultOp, std::uint64_t> calls;
    for (FaultOp op : kAllFaultOps) calls[op] = gpu.calls(op);
    if (strategy == ResidencyStrategy::paged) CHECK(calls[FaultOp::free] > clean.released.allocations_freed);  // evictions

    std::uint64_t runs = 0;
    for (FaultOp op : kAllFaultOps) {
      for (std::uint64_t n = 1; n <= calls[op]; ++n) {
        const std::string run_name = std::string(residency_strategy_name(strategy)) + ", " +
                                     std::string(fault_op_name(op)) + " call " + std::to_string(n) + " of " +
                                     std::to_string(calls[op]) + " fails";
        CAPTURE(run_name);
        gpu.fail_nth(op, n);
        dog.arm(run_name, std::chrono::seconds(60));
        const PagedRun r = run_paged(gpu, *model, *plan, options);
        dog.disarm();
        ++runs;
        const std::vector<InjectedFault> injected = gpu.injected();
        REQUIRE(injected.size() == 1);
        const std::string marker = "injected at call " + std::to_string(n) + " of " + std::string(fault_op_name(op));
        CHECK_MESSAGE(r.retry.ok(), r.retry.to_string());
        CHECK(ballast::faults::same_values(r.values, clean.values));
        if (op == FaultOp::free) {
          CHECK(r.failures.empty());
          if (!r.released.status.ok()) {  // the release's own free: named and counted
            CHECK(r.released.failed_frees == 1);
            CHECK(contains(r.released.status.to_string(), marker));
            const std::vector<DevicePtr> kept = gpu.kept_allocations();
            REQUIRE(kept.size() == 1);
            gpu.disarm();
            CHECK(gpu.free(kept[0]).ok());
          }
        } else if (op == FaultOp::allocate && r.failures.empty()) {
          // The device said out_of_memory below the budget: the object
          // evicted what the policy allowed and tried again, successfully.
          CHECK(injected[0].error.code == ErrorCode::out_of_memory);
          CHECK_MESSAGE(r.released.status.ok(), r.released.status.to_string());
        } else {
          REQUIRE_MESSAGE(r.failures.size() == 1, "failures: " << r.failures.size());
          const std::string text = r.failures[0].to_string();
          CAPTURE(text);
          CHECK(r.failures[0].code() == injected[0].error.code);
          CHECK(contains(text, marker));
          CHECK(contains(text, prefix));
          CHECK((contains(text, "weight '") || contains(text, " of '")));  // names the weight (or its derivation)
          CHECK_MESSAGE(r.released.status.ok(), r.released.status.to_string());
        }
        gpu.disarm();
        CHECK(gpu.counters().live_allocations == baseline.live_allocations);
        CHECK(gpu.counters().live_bytes == baseline.live_bytes);
      }
    }
    MESSAGE(residency_strategy_name(strategy) << ": " << runs << " faulted runs");
  }
}
