// Residency::load() (the cold start) under a device fault at every call.
#include "faults/fault_sweep.hpp"
#include "support/fault_injecting_backend.hpp"

#include <ballast/derive.hpp>
#include <ballast/onnx_loader.hpp>
#include <ballast/residency.hpp>

#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

using namespace ballast;
using namespace ballast::testing;

namespace {

struct LoadRun {
  Status load;
  ResidencyStats after_load;
  AllocationCounters live_after_load;
  std::vector<std::vector<std::byte>> values;
  Status pin;  // the first pin or read-back after the load that failed
  Released released;
};

LoadRun run_load(FaultInjectingBackend& gpu, const Model& model, const std::vector<PlannedDerivation>& plan,
                 const ResidencyOptions& options, bool fault_pins) {
  LoadRun out;
  auto r = Residency::create(gpu, model, options);
  REQUIRE_MESSAGE(r.ok(), r.status().to_string());
  ResidencyLoadOptions o;
  o.read.chunk_bytes = 64 << 10;
  o.read.staging_buffers = 3;
  o.read_cached = true;
  out.load = (*r)->load(o).status();
  out.after_load = (*r)->stats();
  out.live_after_load = gpu.counters();
  if (!fault_pins) gpu.disarm();
  for (const PlannedDerivation& d : plan) {
    auto p = (*r)->pin(d);
    if (!p.ok()) {
      if (out.pin.ok()) out.pin = p.status();
      continue;
    }
    std::vector<std::byte> bytes(p->bytes());
    Status s = gpu.copy_to_host(std::span(bytes).first(p->first_bytes()), p->first(), 0);
    if (s.ok() && p->second_bytes() != 0)
      s = gpu.copy_to_host(std::span(bytes).subspan(p->first_bytes()), p->second(), 0);
    if (!s.ok() && out.pin.ok()) out.pin = s;
    out.values.push_back(std::move(bytes));
  }
  out.released = (*r)->release(gpu);
  return out;
}

}  // namespace

TEST_CASE("cold load: a device fault at every call leaves the accounting exact and nothing leaked") {
  auto model = load_onnx(ballast::faults::model_dir() / "sample.onnx");
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  auto plan = plan_derivations(*model);
  REQUIRE(plan.ok());
  auto full = auto_budget(*model);
  REQUIRE(full.ok());
  GpuBackend& inner = ballast::faults::backend();
  FaultInjectingBackend gpu(inner);
  const AllocationCounters baseline = gpu.counters();
  auto& dog = ballast::faults::watchdog();
  for (ResidencyStrategy strategy : {ResidencyStrategy::paged, ResidencyStrategy::upload}) {
    for (bool half : {false, true}) {
      if (strategy == ResidencyStrategy::upload && half) continue;
      ResidencyOptions options;
      options.strategy = strategy;
      if (half)
        for (std::uint64_t b = full->total / 2; b <= full->total; b += full->total / 20) {
          options.budget_bytes = b;
          if (Residency::create(inner, *model, options).ok()) break;
        }
      gpu.reset_counts();
      const LoadRun clean = run_load(gpu, *model, *plan, options, false);
      REQUIRE_MESSAGE(clean.load.ok(), clean.load.to_string());
      REQUIRE(clean.pin.ok());
      REQUIRE(clean.released.status.ok());
      std::map<FaultOp, std::uint64_t> calls;
      for (FaultOp op : kAllFaultOps) calls[op] = gpu.calls(op);
      for (FaultOp op : kAllFaultOps) {
        for (std::uint64_t n = 1; n <= calls[op]; ++n) {
          const std::string run_name = std::string(residency_strategy_name(strategy)) + (half ? " half" : "") + ", " +
                                       std::string(fault_op_name(op)) + " call " + std::to_string(n) + " of " +
                                       std::to_string(calls[op]);
          CAPTURE(run_name);
          gpu.fail_nth(op, n);
          dog.arm(run_name, std::chrono::seconds(60));
          const LoadRun r = run_load(gpu, *model, *plan, options, false);
          dog.disarm();
          gpu.disarm();
          CHECK(r.after_load.pinned_bytes == 0);
          CHECK(r.after_load.device_bytes <= r.after_load.budget_bytes);
          CHECK(r.after_load.device_bytes == r.live_after_load.live_bytes - baseline.live_bytes);
          CHECK(r.live_after_load.live_registrations - baseline.live_registrations == 0);
          CHECK_MESSAGE(r.pin.ok(), r.pin.to_string());
          CHECK(ballast::faults::same_values(r.values, clean.values));
          if (op != FaultOp::free && op != FaultOp::unregister_host)
            CHECK_MESSAGE(r.released.status.ok(), r.released.status.to_string());
          for (DevicePtr p : gpu.kept_allocations()) (void)gpu.free(p);
          for (DevicePtr p : gpu.kept_registrations()) (void)gpu.unregister_host(p);
          CHECK(gpu.counters().live_allocations == baseline.live_allocations);
          CHECK(gpu.counters().live_bytes == baseline.live_bytes);
          CHECK(gpu.counters().live_registrations == baseline.live_registrations);
        }
      }
    }
  }
}

// A backend that refuses every end of a registration from the load's
// staging ring on: the load goes on, every value pins and reads right,
// release() reports the refusals, and once the backend ends them nothing
// is left. (That the ring itself is then kept: unit_read.)
TEST_CASE("cold load: a staging registration never ended keeps its ring; values stay right") {
  auto model = load_onnx(ballast::faults::model_dir() / "sample.onnx");
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  auto plan = plan_derivations(*model);
  REQUIRE(plan.ok());
  GpuBackend& inner = ballast::faults::backend();
  if (!inner.capabilities().host_registration || !inner.capabilities().read_only_registration) {
    MESSAGE("skipped: the backend registers no host memory read-only, so the ring is never registered");
    return;
  }
  FaultInjectingBackend gpu(inner);
  const AllocationCounters baseline = gpu.counters();
  ResidencyOptions options;
  options.strategy = ResidencyStrategy::upload;
  gpu.reset_counts();
  const LoadRun clean = run_load(gpu, *model, *plan, options, false);
  REQUIRE_MESSAGE(clean.load.ok(), clean.load.to_string());
  REQUIRE(clean.released.status.ok());
  for (int round = 0; round < 3; ++round) {  // the memory of a freed ring would be reused by a later round
    CAPTURE(round);
    gpu.fail_nth(FaultOp::unregister_host, 1, FaultInjectingBackend::Fault::op_from_then_on);
    const LoadRun r = run_load(gpu, *model, *plan, options, true);
    gpu.disarm();
    CHECK_MESSAGE(r.load.ok(), r.load.to_string());
    CHECK_MESSAGE(r.pin.ok(), r.pin.to_string());
    CHECK(ballast::faults::same_values(r.values, clean.values));
    CHECK_FALSE(r.released.status.ok());  // the refused ends, reported
    for (DevicePtr p : gpu.kept_allocations()) (void)gpu.free(p);
    for (DevicePtr p : gpu.kept_registrations()) (void)gpu.unregister_host(p);
    CHECK(gpu.counters().live_allocations == baseline.live_allocations);
    CHECK(gpu.counters().live_registrations == baseline.live_registrations);
  }
}
