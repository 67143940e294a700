// The same objects used again after a device fault (docs/reliability.md,
// "Device faults": nothing half-built is left behind).
//
// The other sweeps start every run on fresh objects. An engine does not: it
// keeps its DeviceWeights, DerivedWeights and Residency for the life of the
// process and tries again once a transient fault has passed. So here each
// faulted run makes one pass with the Nth call of one operation failing,
// then, the fault cleared, makes the same pass again on the same objects,
// and must get:
//   - every value byte-identical to a fault-free run's;
//   - the objects' accounting as after a fault-free pass: the memo's entries
//     and bytes; a Residency's device, registered and pinned bytes; the
//     backend's live allocations, bytes and registrations (beyond what a
//     refused free kept, which the test frees);
//   - a clean release, and the backend back at its baseline.
// For every N from 1 to the calls a fault-free pass makes, for every
// operation, on the sample model and on a small LLM-shaped one
// (tools/gen/make_llm_model.py): derive_weights and derive_weight entry by
// entry; a Residency with each strategy (upload, zero_copy, paged under
// about half its auto budget) pinning every derivation and every weight;
// and Residency::load(), called again after the failed one.
#include "faults/fault_sweep.hpp"
#include "support/fault_injecting_backend.hpp"
#include "support/live_counters.hpp"

#include <ballast/derive.hpp>
#include <ballast/derived_weights.hpp>
#include <ballast/device_weights.hpp>
#include <ballast/onnx_loader.hpp>
#include <ballast/residency.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

using namespace ballast;
using namespace ballast::testing;

namespace {

// The sample model (main.cpp generated it) and a 2-layer LLM-shaped model,
// generated here once.
std::vector<std::filesystem::path> models() {
  static const std::vector<std::filesystem::path> paths = [] {
    std::vector<std::filesystem::path> out{ballast::faults::model_dir() / "sample.onnx"};
    const std::filesystem::path dir = ballast::faults::model_dir() / "llm";
    std::filesystem::create_directories(dir);
    const std::string gen = std::string(BALLAST_TEST_PYTHON) + " " + BALLAST_SOURCE_DIR +
                            "/tools/gen/make_llm_model.py '" + dir.string() +
                            "' --layers 2 --hidden 64 --ffn 128 --vocab 128 >/dev/null 2>&1";
    REQUIRE_MESSAGE(std::system(gen.c_str()) == 0, gen);
    out.push_back(dir / "llm.onnx");
    return out;
  }();
  return paths;
}

// Frees what a refused free or unregistration kept live (the fault cleared).
void free_kept(FaultInjectingBackend& gpu) {
  for (DevicePtr p : gpu.kept_allocations()) {
    const Status s = gpu.free(p);
    CHECK_MESSAGE(s.ok(), s.to_string());
  }
  for (DevicePtr p : gpu.kept_registrations()) {
    const Status s = gpu.unregister_host(p);
    CHECK_MESSAGE(s.ok(), s.to_string());
  }
}

// Releases `r` (which must succeed), frees what a refused free kept, and
// finds the backend back at `baseline`: nothing the Residency lost track of.
void release_to_baseline(FaultInjectingBackend& gpu, Residency& r, const AllocationCounters& baseline) {
  const Released rel = r.release(gpu);
  CHECK_MESSAGE(rel.status.ok(), rel.status.to_string());
  free_kept(gpu);
  CHECK_MESSAGE(same_live(gpu.counters(), baseline), "live after release: " << live_text(gpu.counters()));
}

Result<std::vector<std::byte>> read_back(GpuBackend& gpu, DevicePtr first, DevicePtr second,
                                         const PlannedDerivation& d) {
  DerivationLaunch l = d.launch;
  BALLAST_ASSIGN_OR_RETURN(auto sizes, derivation_sizes(l));
  std::vector<std::byte> out(sizes.dst_bytes + sizes.dst2_bytes);
  const std::span<std::byte> all(out);
  BALLAST_RETURN_IF_ERROR(gpu.copy_to_host(all.first(sizes.dst_bytes), first, 0), "reading back");
  if (sizes.dst2_bytes != 0)
    BALLAST_RETURN_IF_ERROR(gpu.copy_to_host(all.subspan(sizes.dst_bytes), second, 0), "reading back");
  return out;
}

// ---- DeviceWeights + DerivedWeights -------------------------------------

using ballast::faults::Way;

// One pass: every planned derivation, then every value read back.
Result<std::vector<std::vector<std::byte>>> derive_pass(GpuBackend& gpu, const DeriveContext& ctx,
                                                        const std::vector<PlannedDerivation>& plan, Way way) {
  std::vector<DerivedValue> values;
  if (way == Way::batch) {
    BALLAST_ASSIGN_OR_RETURN(values, derive_weights(ctx, plan));
  } else {
    for (const PlannedDerivation& p : plan) {
      BALLAST_ASSIGN_OR_RETURN(auto v, derive_weight(ctx, p));
      values.push_back(v);
    }
  }
  std::vector<std::vector<std::byte>> out;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    BALLAST_ASSIGN_OR_RETURN(auto bytes, read_back(gpu, values[i].first, values[i].second, plan[i]));
    out.push_back(std::move(bytes));
  }
  return out;
}

struct DeriveState {
  std::vector<std::vector<std::byte>> values;
  std::size_t entries = 0;
  std::uint64_t memo_bytes = 0;
  AllocationCounters live;
};

}  // namespace

TEST_CASE("reuse after a device fault: derive_weights / derive_weight on the same DeviceWeights and memo") {
  GpuBackend& inner = ballast::faults::backend();
  FaultInjectingBackend gpu(inner);
  const AllocationCounters baseline = gpu.counters();
  auto& dog = ballast::faults::watchdog();
  std::uint64_t runs = 0;
  for (const auto& path : models()) {
    auto model = load_onnx(path);
    REQUIRE_MESSAGE(model.ok(), model.error().to_string());
    auto plan = plan_derivations(*model);
    REQUIRE(plan.ok());
    for (Way way : {Way::batch, Way::one_by_one}) {
      DeriveState clean;
      gpu.reset_counts();
      {
        DeviceWeights sources(gpu, model->store());
        DerivedWeights memo;
        const DeriveContext ctx{gpu, *model, sources, memo};
        auto v = derive_pass(gpu, ctx, *plan, way);
        REQUIRE_MESSAGE(v.ok(), v.status().to_string());
        clean = {std::move(*v), memo.len(), memo.bytes(), gpu.counters()};
        REQUIRE(memo.release(gpu).status.ok());
        REQUIRE(sources.release(gpu).status.ok());
      }
      std::map<FaultOp, std::uint64_t> calls;
      for (FaultOp op : kAllFaultOps) calls[op] = gpu.calls(op);
      for (FaultOp op : kAllFaultOps) {
        for (std::uint64_t n = 1; n <= calls[op]; ++n) {
          const std::string run = path.filename().string() + ", " + (way == Way::batch ? "batch" : "entry by entry") +
                                  ", " + std::string(fault_op_name(op)) + " call " + std::to_string(n) + " of " +
                                  std::to_string(calls[op]);
          CAPTURE(run);
          dog.arm(run, std::chrono::seconds(60));
          DeviceWeights sources(gpu, model->store());
          DerivedWeights memo;
          const DeriveContext ctx{gpu, *model, sources, memo};
          gpu.fail_nth(op, n);
          auto first = derive_pass(gpu, ctx, *plan, way);
          gpu.disarm();
          free_kept(gpu);
          auto again = derive_pass(gpu, ctx, *plan, way);
          dog.disarm();
          ++runs;
          REQUIRE_MESSAGE(again.ok(), again.status().to_string());
          CHECK(ballast::faults::same_values(*again, clean.values));
          CHECK(memo.len() == clean.entries);
          CHECK(memo.bytes() == clean.memo_bytes);
          // A refused registration leaves the file uploaded instead (said by
          // residency()): more allocations, no registration; values the same.
          if (op != FaultOp::register_host)
            CHECK_MESSAGE(same_live(gpu.counters(), clean.live),
                          "live: " << live_text(gpu.counters()) << "; after a clean pass: " << live_text(clean.live));
          const Released m = memo.release(gpu);
          const Released s = sources.release(gpu);
          CHECK_MESSAGE(m.status.ok(), m.status.to_string());
          CHECK_MESSAGE(s.status.ok(), s.status.to_string());
          CHECK_MESSAGE(same_live(gpu.counters(), baseline), "live after release: " << live_text(gpu.counters()));
        }
      }
    }
  }
  MESSAGE(runs << " faulted runs, each followed by a pass on the same objects");
}

namespace {

// ---- Residency ----------------------------------------------------------

// One pass: every derivation pinned and read back, then every weight.
struct PinPass {
  std::vector<std::vector<std::byte>> values;
  Status first_failure;
  std::size_t failures = 0;
};

PinPass pin_pass(GpuBackend& gpu, Residency& r, const Model& model, const std::vector<PlannedDerivation>& plan) {
  PinPass out;
  auto fail = [&](const Status& s) {
    if (out.failures++ == 0) out.first_failure = s;
  };
  for (const PlannedDerivation& d : plan) {
    auto p = r.pin(d);
    if (!p.ok()) {
      fail(p.status());
      continue;
    }
    auto bytes = read_back(gpu, p->first(), p->second(), d);
    if (!bytes.ok()) {
      fail(bytes.status());
      continue;
    }
    out.values.push_back(std::move(*bytes));
  }
  std::vector<ValueId> ids;
  for (const auto& [id, ref] : model.store().weights()) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (ValueId id : ids) {
    auto p = r.pin(id);
    if (!p.ok()) {
      fail(p.status());
      continue;
    }
    std::vector<std::byte> bytes(p->bytes());
    if (Status s = gpu.copy_to_host(bytes, p->first(), 0); !s.ok()) {
      fail(s);
      continue;
    }
    out.values.push_back(std::move(bytes));
  }
  return out;
}

struct ResidencyCase {
  ResidencyOptions options;
  std::string name;
};

std::vector<ResidencyCase> residency_cases(GpuBackend& inner, const Model& model) {
  std::vector<ResidencyCase> out;
  for (ResidencyStrategy s : {ResidencyStrategy::upload, ResidencyStrategy::zero_copy, ResidencyStrategy::paged}) {
    ResidencyCase c;
    c.options.strategy = s;
    c.name = std::string(residency_strategy_name(s));
    if (s == ResidencyStrategy::paged) {
      auto full = auto_budget(model);
      REQUIRE(full.ok());
      for (std::uint64_t b = full->total / 2; b <= full->total; b += full->total / 20) {
        c.options.budget_bytes = b;
        if (Residency::create(inner, model, c.options).ok()) break;
      }
      c.name += " under " + std::to_string(c.options.budget_bytes.value_or(0)) + " B";
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

TEST_CASE("reuse after a device fault: the same Residency pins again, every strategy") {
  GpuBackend& inner = ballast::faults::backend();
  FaultInjectingBackend gpu(inner);
  const AllocationCounters baseline = gpu.counters();
  auto& dog = ballast::faults::watchdog();
  std::uint64_t runs = 0;
  for (const auto& path : models()) {
    auto model = load_onnx(path);
    REQUIRE_MESSAGE(model.ok(), model.error().to_string());
    auto plan = plan_derivations(*model);
    REQUIRE(plan.ok());
    for (const ResidencyCase& c : residency_cases(inner, *model)) {
      const bool paged = c.options.strategy == ResidencyStrategy::paged;
      gpu.reset_counts();
      PinPass clean;
      ResidencyStats clean_stats;
      {
        auto r = Residency::create(gpu, *model, c.options);
        REQUIRE_MESSAGE(r.ok(), r.status().to_string());
        clean = pin_pass(gpu, **r, *model, *plan);
        REQUIRE_MESSAGE(clean.failures == 0, clean.first_failure.to_string());
        clean_stats = (*r)->stats();
        REQUIRE((*r)->release(gpu).status.ok());
      }
      std::map<FaultOp, std::uint64_t> calls;
      for (FaultOp op : kAllFaultOps) calls[op] = gpu.calls(op);
      for (FaultOp op : kAllFaultOps) {
        for (std::uint64_t n = 1; n <= calls[op]; ++n) {
          const std::string run = path.filename().string() + ", " + c.name + ", " + std::string(fault_op_name(op)) +
                                  " call " + std::to_string(n) + " of " + std::to_string(calls[op]);
          CAPTURE(run);
          dog.arm(run, std::chrono::seconds(60));
          auto r = Residency::create(gpu, *model, c.options);
          REQUIRE_MESSAGE(r.ok(), r.status().to_string());
          gpu.fail_nth(op, n);
          const PinPass first = pin_pass(gpu, **r, *model, *plan);
          gpu.disarm();
          // A free the backend refused is the Residency's still (stuck_bytes):
          // it asks again when room is short and at release().
          const PinPass again = pin_pass(gpu, **r, *model, *plan);
          dog.disarm();
          ++runs;
          CHECK_MESSAGE(first.failures <= 1,
                        first.failures << " failures, the first: " << first.first_failure.to_string());
          REQUIRE_MESSAGE(again.failures == 0, again.first_failure.to_string());
          CHECK(ballast::faults::same_values(again.values, clean.values));
          const ResidencyStats st = (*r)->stats();
          CAPTURE(st.to_string());
          CHECK(st.pinned_bytes == 0);
          CHECK(st.device_bytes <= st.budget_bytes);
          // What the Residency says it holds is what the device holds (a
          // free an eviction could not make is counted in stuck_bytes and
          // still in device_bytes).
          CHECK(st.device_bytes == gpu.counters().live_bytes - baseline.live_bytes);
          if (!paged && op != FaultOp::register_host) {
            CHECK(st.device_bytes == clean_stats.device_bytes);
            CHECK(st.registered_bytes == clean_stats.registered_bytes);
            CHECK_MESSAGE(gpu.counters().live_registrations - baseline.live_registrations ==
                              (*r)->registrations().registered_ranges,
                          live_text(gpu.counters()));
          }
          release_to_baseline(gpu, **r, baseline);
        }
      }
    }
  }
  MESSAGE(runs << " faulted runs, each followed by a pass on the same Residency");
}

TEST_CASE("reuse after a device fault: load() again on the same Residency") {
  GpuBackend& inner = ballast::faults::backend();
  FaultInjectingBackend gpu(inner);
  const AllocationCounters baseline = gpu.counters();
  auto& dog = ballast::faults::watchdog();
  ResidencyLoadOptions lo;
  lo.read.chunk_bytes = 64 << 10;
  lo.read.staging_buffers = 3;
  lo.read_cached = true;
  std::uint64_t runs = 0;
  for (const auto& path : models()) {
    auto model = load_onnx(path);
    REQUIRE_MESSAGE(model.ok(), model.error().to_string());
    auto plan = plan_derivations(*model);
    REQUIRE(plan.ok());
    for (const ResidencyCase& c : residency_cases(inner, *model)) {
      gpu.reset_counts();
      ResidencyStats clean_stats;
      PinPass clean;
      {
        auto r = Residency::create(gpu, *model, c.options);
        REQUIRE_MESSAGE(r.ok(), r.status().to_string());
        auto report = (*r)->load(lo);
        REQUIRE_MESSAGE(report.ok(), report.status().to_string());
        clean_stats = (*r)->stats();
        gpu.disarm();
        clean = pin_pass(gpu, **r, *model, *plan);
        REQUIRE_MESSAGE(clean.failures == 0, clean.first_failure.to_string());
        REQUIRE((*r)->release(gpu).status.ok());
      }
      std::map<FaultOp, std::uint64_t> calls;
      {
        // Count the load's calls alone.
        auto r = Residency::create(gpu, *model, c.options);
        REQUIRE(r.ok());
        gpu.reset_counts();
        REQUIRE((*r)->load(lo).ok());
        for (FaultOp op : kAllFaultOps) calls[op] = gpu.calls(op);
        REQUIRE((*r)->release(gpu).status.ok());
      }
      for (FaultOp op : kAllFaultOps) {
        for (std::uint64_t n = 1; n <= calls[op]; ++n) {
          const std::string run = path.filename().string() + ", load, " + c.name + ", " +
                                  std::string(fault_op_name(op)) + " call " + std::to_string(n) + " of " +
                                  std::to_string(calls[op]);
          CAPTURE(run);
          dog.arm(run, std::chrono::seconds(60));
          auto r = Residency::create(gpu, *model, c.options);
          REQUIRE_MESSAGE(r.ok(), r.status().to_string());
          gpu.fail_nth(op, n);
          auto first = (*r)->load(lo);
          gpu.disarm();
          auto again = (*r)->load(lo);
          CHECK_MESSAGE(again.ok(), again.status().to_string());
          const ResidencyStats st = (*r)->stats();
          CAPTURE(st.to_string());
          if (op != FaultOp::register_host && op != FaultOp::free && op != FaultOp::unregister_host)
            CHECK(st.device_bytes == clean_stats.device_bytes);
          CHECK(st.pinned_bytes == 0);
          CHECK(st.device_bytes == gpu.counters().live_bytes - baseline.live_bytes);
          const PinPass pass = pin_pass(gpu, **r, *model, *plan);
          dog.disarm();
          ++runs;
          REQUIRE_MESSAGE(pass.failures == 0, pass.first_failure.to_string());
          CHECK(ballast::faults::same_values(pass.values, clean.values));
          release_to_baseline(gpu, **r, baseline);
        }
      }
    }
  }
  MESSAGE(runs << " faulted loads, each followed by load() again on the same Residency");
}

// The device lost at call N (every later call of every operation fails,
// frees included) while a Residency pins or loads: no crash or hang, every
// failure a typed error, and once release() has run, everything still live
// on the backend is what a refused free or unregistration kept (nothing
// the Residency lost track of).
TEST_CASE("the device lost at every call of a Residency's pins and load") {
  GpuBackend& inner = ballast::faults::backend();
  FaultInjectingBackend gpu(inner);
  const AllocationCounters baseline = gpu.counters();
  auto& dog = ballast::faults::watchdog();
  ResidencyLoadOptions lo;
  lo.read.chunk_bytes = 64 << 10;
  lo.read.staging_buffers = 3;
  lo.read_cached = true;
  std::uint64_t runs = 0;
  for (const auto& path : models()) {
    auto model = load_onnx(path);
    REQUIRE_MESSAGE(model.ok(), model.error().to_string());
    auto plan = plan_derivations(*model);
    REQUIRE(plan.ok());
    for (const ResidencyCase& c : residency_cases(inner, *model)) {
      for (bool load : {false, true}) {
        std::map<FaultOp, std::uint64_t> calls;
        {
          auto r = Residency::create(gpu, *model, c.options);
          REQUIRE(r.ok());
          gpu.reset_counts();
          if (load) REQUIRE((*r)->load(lo).ok());
          REQUIRE(pin_pass(gpu, **r, *model, *plan).failures == 0);
          for (FaultOp op : kAllFaultOps) calls[op] = gpu.calls(op);
          REQUIRE((*r)->release(gpu).status.ok());
        }
        for (FaultOp op : kAllFaultOps) {
          for (std::uint64_t n = 1; n <= calls[op]; ++n) {
            const std::string run = path.filename().string() + ", " + c.name + (load ? ", load then pins" : ", pins") +
                                    ", device lost at " + std::string(fault_op_name(op)) + " call " +
                                    std::to_string(n) + " of " + std::to_string(calls[op]);
            CAPTURE(run);
            dog.arm(run, std::chrono::seconds(60));
            auto r = Residency::create(gpu, *model, c.options);
            REQUIRE_MESSAGE(r.ok(), r.status().to_string());
            gpu.fail_nth(op, n, FaultInjectingBackend::Fault::from_then_on);
            Status load_status;
            if (load) load_status = (*r)->load(lo).status();
            const PinPass pass = pin_pass(gpu, **r, *model, *plan);
            const ResidencyStats st = (*r)->stats();
            const Released rel = (*r)->release(gpu);
            dog.disarm();
            ++runs;
            const bool fired = !gpu.injected().empty();
            gpu.disarm();
            CAPTURE(st.to_string());
            CHECK(st.pinned_bytes == 0);
            if (fired && op != FaultOp::free && op != FaultOp::unregister_host && op != FaultOp::register_host)
              CHECK((!load_status.ok() || pass.failures > 0));
            // Each error is the device's (injected), or a budget that the
            // frees the device refused now fill, saying so.
            for (const Status& s : {load_status, pass.first_failure})
              if (!s.ok())
                CHECK_MESSAGE((s.to_string().find("injected at call") != std::string::npos ||
                               s.to_string().find("frees the device refused") != std::string::npos),
                              s.to_string());
            (void)rel;
            free_kept(gpu);
            CHECK_MESSAGE(same_live(gpu.counters(), baseline),
                          "live after release and the kept frees: " << live_text(gpu.counters()));
          }
        }
      }
    }
  }
  MESSAGE(runs << " runs with the device lost");
}

namespace {

// Every group pinned whole, each member read back; the set then dropped.
PinPass group_pass(GpuBackend& gpu, Residency& r, bool check_none_pinned_on_failure) {
  PinPass out;
  for (const ResidencyGroup& g : r.groups()) {
    auto set = r.pin(g);
    if (!set.ok()) {
      if (out.failures++ == 0) out.first_failure = set.status();
      // All or nothing: a failed group leaves none of its members pinned.
      if (check_none_pinned_on_failure) CHECK_MESSAGE(r.stats().pinned_bytes == 0, g.name);
      continue;
    }
    for (std::size_t i = 0; i < g.derivations.size(); ++i) {
      const Pinned& p = set->derived[i];
      auto bytes = read_back(gpu, p.first(), p.second(), g.derivations[i]);
      if (!bytes.ok()) {
        if (out.failures++ == 0) out.first_failure = bytes.status();
        continue;
      }
      out.values.push_back(std::move(*bytes));
    }
    for (const Pinned& p : set->weights) {
      std::vector<std::byte> bytes(p.bytes());
      if (Status s = gpu.copy_to_host(bytes, p.first(), 0); !s.ok()) {
        if (out.failures++ == 0) out.first_failure = s;
        continue;
      }
      out.values.push_back(std::move(bytes));
    }
  }
  return out;
}

}  // namespace

// pin(group) is every member or none; a prefetch that fails is counted and
// the next pin tries again. With the Nth call failing: a failed group pin
// leaves nothing of the group pinned, the same Residency pins every group
// again afterwards with the values of a fault-free run, and a prefetch pass
// under the fault leaves pins that succeed with the same values.
TEST_CASE("reuse after a device fault: layer groups pinned whole, and prefetches") {
  GpuBackend& inner = ballast::faults::backend();
  FaultInjectingBackend gpu(inner);
  const AllocationCounters baseline = gpu.counters();
  auto& dog = ballast::faults::watchdog();
  auto model = load_onnx(models()[1]);
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  auto plan = plan_derivations(*model);
  REQUIRE(plan.ok());
  std::uint64_t runs = 0;
  for (const ResidencyCase& base_case : residency_cases(inner, *model)) {
    ResidencyCase c = base_case;
    c.options.group_by = group_by_layer("layers.");
    if (c.options.strategy == ResidencyStrategy::paged) {
      c.options.budget_bytes.reset();  // create() needs room for the largest group: find the least it takes
      auto full = auto_budget(*model);
      REQUIRE(full.ok());
      for (std::uint64_t b = full->total / 2; b <= full->total; b += full->total / 20) {
        c.options.budget_bytes = b;
        if (Residency::create(inner, *model, c.options).ok()) break;
      }
    }
    for (bool prefetch : {false, true}) {
      gpu.reset_counts();
      PinPass clean;
      {
        auto r = Residency::create(gpu, *model, c.options);
        REQUIRE_MESSAGE(r.ok(), r.status().to_string());
        REQUIRE(!(*r)->groups().empty());
        if (prefetch) {
          (*r)->prefetch(std::span<const PlannedDerivation>(*plan));
          (*r)->wait_for_prefetches();
        }
        clean = group_pass(gpu, **r, false);
        REQUIRE_MESSAGE(clean.failures == 0, clean.first_failure.to_string());
        REQUIRE((*r)->release(gpu).status.ok());
      }
      std::map<FaultOp, std::uint64_t> calls;
      for (FaultOp op : kAllFaultOps) calls[op] = gpu.calls(op);
      for (FaultOp op : kAllFaultOps) {
        for (std::uint64_t n = 1; n <= calls[op]; ++n) {
          const std::string run = c.name + (prefetch ? ", prefetch then groups" : ", groups") + ", " +
                                  std::string(fault_op_name(op)) + " call " + std::to_string(n) + " of " +
                                  std::to_string(calls[op]);
          CAPTURE(run);
          dog.arm(run, std::chrono::seconds(60));
          auto r = Residency::create(gpu, *model, c.options);
          REQUIRE_MESSAGE(r.ok(), r.status().to_string());
          gpu.fail_nth(op, n);
          PinPass first;
          if (prefetch) {
            (*r)->prefetch(std::span<const PlannedDerivation>(*plan));
            (*r)->wait_for_prefetches();
            first = group_pass(gpu, **r, true);
          } else {
            first = group_pass(gpu, **r, true);
          }
          gpu.disarm();
          const PinPass again = group_pass(gpu, **r, true);
          dog.disarm();
          ++runs;
          CHECK_MESSAGE(first.failures <= 1,
                        first.failures << " failures, the first: " << first.first_failure.to_string());
          REQUIRE_MESSAGE(again.failures == 0, again.first_failure.to_string());
          CHECK(ballast::faults::same_values(again.values, clean.values));
          const ResidencyStats st = (*r)->stats();
          CAPTURE(st.to_string());
          CHECK(st.pinned_bytes == 0);
          CHECK(st.device_bytes == gpu.counters().live_bytes - baseline.live_bytes);
          release_to_baseline(gpu, **r, baseline);
        }
      }
    }
  }
  MESSAGE(runs << " faulted runs of group pins and prefetches");
}
