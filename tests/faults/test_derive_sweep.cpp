// The whole derive path under a device fault at every call (issue 12 §1).
//
// One scenario, what `ballast derive --dump` does: DeviceWeights and
// DerivedWeights on the backend, every planned derivation of the sample
// model (all five kinds, both waves), every derived value read back, then
// a TeardownHost releases both. It runs once clean, through a
// FaultInjectingBackend that counts the calls of each operation, and then
// once for every N from 1 to that count, for each operation, with the Nth
// call failing. Both ways in: derive_weights() (the batch) and
// derive_weight() one entry at a time (the CLI's loop).
//
// Every faulted run must:
//   - end with an error naming the failed operation (the core's
//     "<backend>: <operation>" words), carrying the injected error (code,
//     driver name), and naming a weight of the model;
//     except register_host: a refused registration is not an error, the
//     file's weights are uploaded instead (residency says so and why) and
//     every derived value is byte-identical to the clean run's;
//     and free / unregister_host, which only teardown calls: the teardown
//     report then names the one refused free (its pointer) and counts it,
//     and every other resource releases cleanly;
//   - leave exactly what it could not free live (nothing, unless a free was
//     refused); freeing that returns the decorator's and the wrapped
//     backend's counters to their baseline;
//   - finish (each run is under a watchdog), and tear down idempotently.
#include "support/text.hpp"
#include "faults/fault_sweep.hpp"
#include "support/fault_injecting_backend.hpp"
#include "support/live_counters.hpp"

#include <ballast/derive.hpp>
#include <ballast/log.hpp>
#include <ballast/model_resource.hpp>
#include <ballast/onnx_loader.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace ballast;
using namespace ballast::testing;
using ballast::faults::backend;

namespace {

using ballast::faults::Way;

const char* way_name(Way w) { return w == Way::batch ? "derive_weights" : "derive_weight per entry"; }

std::string hex_of(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

using ballast::testing::contains;

struct RunResult {
  Status failure;  // the first error of deriving or reading back; ok if none
  TeardownReport report;
  TeardownReport again;  // a second teardown: frees nothing
  WeightResidency residency;
  std::vector<std::vector<std::byte>> values;  // every output read back, in plan order
};

// One scenario run on `gpu`.
RunResult run_once(GpuBackend& gpu, const Model& model, const std::vector<PlannedDerivation>& plan, Way way) {
  RunResult out;
  DeviceWeights sources(gpu, model.store());
  DerivedWeights memo;
  TeardownHost<GpuBackend> host(gpu);  // declared last: destroyed first
  host.add(sources);
  host.add(memo);
  const DeriveContext ctx{gpu, model, sources, memo};

  std::vector<DerivedValue> values;
  if (way == Way::batch) {
    auto all = derive_weights(ctx, plan);
    if (all.ok()) {
      values = std::move(*all);
    } else {
      out.failure = all.status();
    }
  } else {
    for (const PlannedDerivation& p : plan) {
      auto v = derive_weight(ctx, p);
      if (!v.ok()) {
        out.failure = v.status();
        break;
      }
      values.push_back(*v);
    }
  }
  // Read every value back, as `ballast derive --dump` does.
  if (out.failure.ok()) {
    for (std::size_t i = 0; i < plan.size() && out.failure.ok(); ++i) {
      DerivationLaunch l = plan[i].launch;
      auto sizes = derivation_sizes(l);
      REQUIRE(sizes.ok());
      const std::pair<DevicePtr, std::uint64_t> outputs[] = {{values[i].first, sizes->dst_bytes},
                                                             {values[i].second, sizes->dst2_bytes}};
      for (const auto& [ptr, bytes] : outputs) {
        if (bytes == 0) continue;
        std::vector<std::byte> host_bytes(bytes);
        if (Status s = gpu.copy_to_host(host_bytes, ptr, 0); !s.ok()) {
          out.failure = std::move(s).with_context("reading back " + std::string(derivation_name(plan[i].kind())) +
                                                  " of '" + plan[i].weight + "'");
          break;
        }
        out.values.push_back(std::move(host_bytes));
      }
    }
  }
  out.residency = sources.residency();
  out.report = host.teardown(gpu);
  out.again = host.teardown(gpu);
  return out;
}

// Every name an error may use for a weight of the plan.
std::set<std::string> weight_names(const Model& model, const std::vector<PlannedDerivation>& plan) {
  std::set<std::string> names;
  for (const PlannedDerivation& p : plan) {
    names.insert(p.weight);
    if (p.scales) names.insert(std::string(model.value_name(*p.scales)));
    if (p.zero_points) names.insert(std::string(model.value_name(*p.zero_points)));
  }
  return names;
}

// The core's words for the call, after "<backend>: ".
bool names_operation(const std::string& text, const std::string& prefix, FaultOp op) {
  const std::string words(fault_op_words(op));
  if (op == FaultOp::copy_to_device || op == FaultOp::copy_to_host || op == FaultOp::copy_device)
    return contains(text, prefix + "copy ") && contains(text, " bytes " + words);
  return contains(text, prefix + words);
}

bool names_a_weight(const std::string& text, const std::set<std::string>& names) {
  for (const std::string& n : names)
    if (contains(text, "'" + n + "'")) return true;
  return false;
}

// The "owned by no one (0x.., 0x..)" lists of an error: allocations a
// failing derivation or upload could not free.
std::string orphan_lists(const std::string& text) {
  std::string out;
  const std::string tag = "owned by no one (";
  for (std::size_t at = text.find(tag); at != std::string::npos; at = text.find(tag, at + 1)) {
    const std::size_t end = text.find(')', at);
    out += text.substr(at + tag.size(), end == std::string::npos ? std::string::npos : end + 1 - at - tag.size());
  }
  return out;
}

struct SweepTotals {
  std::map<FaultOp, std::uint64_t> calls;
  std::uint64_t runs = 0;
  double seconds = 0;
};

void sweep(Way way, FaultInjectingBackend::Fault mode) {
  const bool lost = mode == FaultInjectingBackend::Fault::from_then_on;
  auto model = load_onnx(ballast::faults::model_dir() / "sample.onnx");
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  auto plan = plan_derivations(*model);
  REQUIRE_MESSAGE(plan.ok(), plan.error().to_string());
  std::set<Derivation> kinds;
  for (const PlannedDerivation& p : *plan) kinds.insert(p.kind());
  // The model has every kind an ONNX graph plans. The GGUF kinds read GGUF
  // block types (no ONNX tensor has one); they take the same derive path
  // and backend calls, only another kernel; quant_int8_given_max is
  // planned by the sharded derive only (plan_shard_derivations), and slice
  // is launched by an engine gathering its shards (gather_launch).
  std::size_t onnx_kinds = 0;
  for (const ballast::kinds::Kind& k : ballast::kinds::kTable)
    onnx_kinds += k.gguf_blocks || k.kind == Derivation::quant_int8_given_max || k.kind == Derivation::slice ? 0 : 1;
  REQUIRE(kinds.size() == onnx_kinds);
  const std::set<std::string> names = weight_names(*model, *plan);

  // Fallback warnings go to the test log only when they are unexpected.
  std::vector<std::string> logged;
  set_log_sink([&logged](const LogMessage& m) { logged.emplace_back(m.text); });

  GpuBackend& inner = backend();
  FaultInjectingBackend gpu(inner);
  const std::string prefix = inner.info().backend + ": ";
  const AllocationCounters inner_baseline = inner.counters();
  const AllocationCounters baseline = gpu.counters();
  auto& dog = ballast::faults::watchdog();
  const auto limit = std::chrono::seconds(60);

  // The counting run: nothing fails.
  gpu.reset_counts();
  dog.arm(std::string("the clean run (") + way_name(way) + ")", limit);
  const RunResult clean = run_once(gpu, *model, *plan, way);
  dog.disarm();
  REQUIRE_MESSAGE(clean.failure.ok(), clean.failure.to_string());
  REQUIRE_MESSAGE(clean.report.ok(), clean.report.to_string());
  REQUIRE(same_live(gpu.counters(), baseline));
  REQUIRE(same_live(inner.counters(), inner_baseline));
  CHECK(logged.empty());
  SweepTotals totals;
  for (FaultOp op : kAllFaultOps) totals.calls[op] = gpu.calls(op);
  const bool registers = clean.residency.registered_files > 0;

  // BALLAST_FAULTS_VERBOSE=1: print what each faulted run said.
  const bool verbose = std::getenv("BALLAST_FAULTS_VERBOSE") != nullptr;
  const auto start = std::chrono::steady_clock::now();
  for (FaultOp op : kAllFaultOps) {
    for (std::uint64_t n = 1; n <= totals.calls[op]; ++n) {
      const std::string run_name = std::string(way_name(way)) + ", " + std::string(fault_op_name(op)) + " call " +
                                   std::to_string(n) + " of " + std::to_string(totals.calls[op]) +
                                   (lost ? " fails and the device is lost" : " fails");
      CAPTURE(run_name);
      logged.clear();
      gpu.fail_nth(op, n, mode);
      dog.arm(run_name, limit);
      const RunResult r = run_once(gpu, *model, *plan, way);
      dog.disarm();
      totals.runs += 1;

      if (verbose) {
        const std::string said = !r.failure.ok()  ? r.failure.to_string()
                                 : !r.report.ok() ? r.report.status().to_string()
                                                  : r.residency.fallback_reason;
        std::printf("%s\n    %s\n", run_name.c_str(), said.c_str());
      }

      if (mode == FaultInjectingBackend::Fault::once) {
        // The fault happened, once, where it was asked for.
        const std::vector<InjectedFault> injected = gpu.injected();
        REQUIRE(injected.size() == 1);
        const InjectedFault& fault = injected[0];
        CHECK(fault.op == op);
        CHECK(fault.call == n);
        const std::string marker = "injected at call " + std::to_string(n) + " of " + std::string(fault_op_name(op));

        // A second teardown frees nothing, whatever happened.
        CHECK(r.again.ok());
        CHECK(r.again.allocations_freed() == 0);

        if (op == FaultOp::register_host) {
          // Not an error: the file's weights are uploaded instead, and said so.
          CHECK_MESSAGE(r.failure.ok(), r.failure.to_string());
          CHECK(r.report.ok());
          CHECK(r.residency.fallback_files == 1);
          CHECK(r.residency.registered_files + 1 == clean.residency.registered_files);
          CHECK(r.residency.uploaded_weights > clean.residency.uploaded_weights);
          CHECK_MESSAGE(names_operation(r.residency.fallback_reason, prefix, op), r.residency.fallback_reason);
          CHECK_MESSAGE(contains(r.residency.fallback_reason, fault.error.native), r.residency.fallback_reason);
          CHECK(ballast::faults::same_values(r.values, clean.values));  // the same bytes, read from uploads
          REQUIRE(logged.size() == 1);
          CHECK(contains(logged[0], fault.error.native));
        } else if (op == FaultOp::free || op == FaultOp::unregister_host) {
          // Only teardown frees on this path: the report names and counts
          // the one it could not do; everything else was freed.
          CHECK_MESSAGE(r.failure.ok(), r.failure.to_string());
          CHECK(ballast::faults::same_values(r.values, clean.values));
          CHECK_FALSE(r.report.ok());
          CHECK(r.report.failed_resources() == 1);
          std::uint64_t failed = 0;
          for (const TeardownEntry& e : r.report.entries) failed += e.failed_frees;
          CHECK(failed == 1);
          const std::string text = r.report.status().to_string();
          CAPTURE(text);
          const std::string at = op == FaultOp::free ? prefix + "free " + hex_of(fault.ptr)
                                                     : prefix + "unregister host memory at " + hex_of(fault.ptr);
          CHECK(contains(text, at));
          CHECK(contains(text, marker));
          // ...and what it was: a derived value (its derivation and key), an
          // upload (its file and offset, or its value id), a mapping (its file).
          if (op == FaultOp::unregister_host)
            CHECK(contains(
                text, "unregistering the mapping of " + (ballast::faults::model_dir() / "sample.weights").string()));
          else
            CHECK((contains(text, " value " + hex_of(fault.ptr) + " of source 0x") ||
                   contains(text, "-byte upload of ")));
          CHECK(r.report.status().code() == fault.error.code);
          if (op == FaultOp::free) {
            CHECK(r.report.allocations_freed() + 1 == clean.report.allocations_freed());
            CHECK(r.report.bytes_freed() + fault.bytes == clean.report.bytes_freed());
            CHECK(gpu.kept_allocations() == std::vector<DevicePtr>{fault.ptr});
            CHECK(gpu.counters().live_allocations == baseline.live_allocations + 1);
            CHECK(inner.counters().live_allocations == inner_baseline.live_allocations + 1);
          } else {
            CHECK(r.report.allocations_freed() == clean.report.allocations_freed());
            CHECK(gpu.kept_registrations() == std::vector<DevicePtr>{fault.ptr});
            CHECK(gpu.counters().live_registrations == baseline.live_registrations + 1);
            CHECK(inner.counters().live_registrations == inner_baseline.live_registrations + 1);
          }
        } else {
          // The run fails with the device's error, named and placed.
          REQUIRE_FALSE(r.failure.ok());
          const std::string text = r.failure.to_string();
          CAPTURE(text);
          CHECK(r.failure.code() == fault.error.code);
          CHECK(r.failure.error().native == fault.error.native);
          CHECK(names_operation(text, prefix, op));
          CHECK(contains(text, marker));
          CHECK(names_a_weight(text, names));
          // Everything that was built is released cleanly.
          CHECK_MESSAGE(r.report.ok(), r.report.to_string());
          CHECK(gpu.kept_allocations().empty());
          CHECK(gpu.kept_registrations().empty());
          CHECK(logged.empty());
        }

      } else {
        // A lost device: the Nth call and every call after it fail.
        const std::vector<InjectedFault> injected = gpu.injected();
        REQUIRE_FALSE(injected.empty());
        CHECK(injected[0].op == op);
        CHECK(injected[0].call == n);
        const std::string marker = "injected at call " + std::to_string(n) + " of " + std::string(fault_op_name(op));
        CHECK(r.again.ok());
        CHECK(r.again.allocations_freed() == 0);
        if (op == FaultOp::free || op == FaultOp::unregister_host) {
          CHECK_MESSAGE(r.failure.ok(), r.failure.to_string());  // lost only while tearing down
          CHECK_FALSE(r.report.ok());
          CHECK(contains(r.report.status().to_string(), marker));
        } else {
          REQUIRE_FALSE(r.failure.ok());
          const std::string text = r.failure.to_string();
          CAPTURE(text);
          CHECK(names_a_weight(text, names));
          if (op == FaultOp::register_host) {
            // Registration falls back to uploads, whose allocate then fails.
            CHECK(contains(r.residency.fallback_reason, marker));
            CHECK(contains(text, "injected at call 1 of allocate"));
          } else {
            CHECK(contains(text, marker));
            CHECK(names_operation(text, prefix, op));
          }
        }
        // Nothing is left live unaccounted for: each allocation or
        // registration a refused free kept is either named by the run's
        // error (freed while failing, by no one else) or counted by the
        // teardown report (freed while tearing down).
        std::vector<DevicePtr> kept = gpu.kept_allocations();
        for (DevicePtr p : gpu.kept_registrations()) kept.push_back(p);
        const std::string failure_text = r.failure.ok() ? std::string() : r.failure.to_string();
        const std::string orphans = orphan_lists(failure_text);
        std::uint64_t named = 0;
        for (DevicePtr p : kept)
          named += contains(orphans, hex_of(p) + ",") || contains(orphans, hex_of(p) + ")") ? 1 : 0;
        std::uint64_t reported = 0;
        for (const TeardownEntry& e : r.report.entries) reported += e.failed_frees;
        CHECK_MESSAGE(named + reported == kept.size(),
                      kept.size() << " kept live, " << named << " named by the error, " << reported
                                  << " reported by teardown: " << failure_text << " / " << r.report.to_string());
      }

      // Free what a refused free left, then both records are at baseline.
      gpu.disarm();
      for (DevicePtr p : gpu.kept_allocations()) CHECK(gpu.free(p).ok());
      for (DevicePtr p : gpu.kept_registrations()) CHECK(gpu.unregister_host(p).ok());
      CHECK_MESSAGE(same_live(gpu.counters(), baseline), live_text(gpu.counters()));
      CHECK_MESSAGE(same_live(inner.counters(), inner_baseline), live_text(inner.counters()));
      if (!same_live(inner.counters(), inner_baseline)) {
        set_log_sink({});
        FAIL("the wrapped backend did not return to its baseline; stopping the sweep");
      }
    }
  }
  totals.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  set_log_sink({});

  std::string counts;
  for (FaultOp op : kAllFaultOps)
    counts += " " + std::string(fault_op_name(op)) + "=" + std::to_string(totals.calls[op]);
  std::printf("%s on %s%s: calls per run:%s; %llu faulted runs in %.2f s%s\n", way_name(way),
              inner.info().backend.c_str(), lost ? " (device lost)" : "", counts.c_str(),
              static_cast<unsigned long long>(totals.runs), totals.seconds,
              registers ? "" : " (the backend registers no host memory)");
  std::fflush(stdout);
  // Every operation the path uses was swept; the path uses these at least.
  CHECK(totals.calls[FaultOp::allocate] > 0);
  CHECK(totals.calls[FaultOp::free] > 0);
  CHECK(totals.calls[FaultOp::launch] > 0);
  CHECK(totals.calls[FaultOp::synchronize] > 0);
  CHECK(totals.calls[FaultOp::copy_to_device] > 0);  // the inline zero points are uploaded
  CHECK(totals.calls[FaultOp::copy_to_host] > 0);
  if (registers) {
    CHECK(totals.calls[FaultOp::register_host] > 0);
    CHECK(totals.calls[FaultOp::unregister_host] > 0);
  }
}

}  // namespace

TEST_CASE("a device fault at every call of derive_weights") { sweep(Way::batch, FaultInjectingBackend::Fault::once); }

TEST_CASE("a device fault at every call of derive_weight, entry by entry (the ballast derive loop)") {
  sweep(Way::one_by_one, FaultInjectingBackend::Fault::once);
}

// The same sweeps with the device lost at the Nth call: every later call
// fails too, so the frees on the error paths and in teardown fail as well.
TEST_CASE("the device lost at every call of derive_weights") {
  sweep(Way::batch, FaultInjectingBackend::Fault::from_then_on);
}

TEST_CASE("the device lost at every call of derive_weight, entry by entry") {
  sweep(Way::one_by_one, FaultInjectingBackend::Fault::from_then_on);
}

// A batch whose synchronize fails names what it was waiting for: the first
// three derivations by weight, the rest counted ("and N more" only when
// there are more).
TEST_CASE("a failed batch synchronize names three pending derivations and counts the rest") {
  auto model = load_onnx(ballast::faults::model_dir() / "sample.onnx");
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  auto plan = plan_derivations(*model);
  REQUIRE_MESSAGE(plan.ok(), plan.error().to_string());
  // One wave: derivations that read a source, not another derivation.
  std::vector<PlannedDerivation> wave;
  for (const PlannedDerivation& p : *plan)
    if (p.kind() != Derivation::quant_int8) wave.push_back(p);
  REQUIRE(wave.size() >= 4);
  for (std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{4}}) {
    CAPTURE(n);
    const std::vector<PlannedDerivation> part(wave.begin(), wave.begin() + static_cast<std::ptrdiff_t>(n));
    FaultInjectingBackend gpu(backend());
    gpu.fail_nth(FaultOp::synchronize, 1);
    const RunResult r = run_once(gpu, *model, part, Way::batch);
    REQUIRE_FALSE(r.failure.ok());
    const std::string text = r.failure.to_string();
    CAPTURE(text);
    CHECK(contains(text, "waiting for " + std::to_string(n) + (n == 1 ? " derivation (" : " derivations (")));
    for (std::size_t i = 0; i < n && i < 3; ++i) CHECK(contains(text, "of '" + part[i].weight + "'"));
    // The list reads as English: "a", "a, b and c", "a, b, c and 1 more".
    auto named = [&](std::size_t i) { return std::string(derivation_name(part[i].kind())) + " of '" + part[i].weight + "'"; };
    if (n == 3) CHECK(contains(text, "(" + named(0) + ", " + named(1) + " and " + named(2) + ")"));
    if (n == 4) CHECK(contains(text, "(" + named(0) + ", " + named(1) + ", " + named(2) + " and 1 more)"));
    CHECK(contains(text, " more)") == (n > 3));
    if (n > 3) CHECK(contains(text, "and " + std::to_string(n - 3) + " more)"));
  }
}
