// Running out of host memory on the derive path: every allocation of this
// thread during derive_weights() (the batch), and during derive_weight()
// entry by entry, is made to fail in turn (std::bad_alloc), on one
// DeviceWeights and one memo. After each, with memory back, the same two
// objects derive the whole plan again: every value byte-identical to a run
// without a failure, the memo holding the same entries and bytes, the
// backend the same allocations and registrations; release() then frees
// everything. No exception escapes (derive_weights, derive_weight and
// GpuBackend::copy_to_host return out_of_memory instead). This
// binary replaces the global operator new, so it is a test of its own.
#include "support/thread_failing_new.hpp"

#include <ballast/backend_registry.hpp>
#include <ballast/derive.hpp>
#include <ballast/onnx_loader.hpp>

#include "support/live_counters.hpp"
#include "support/orphaned_prefix_model.hpp"
#include "support/inline_matmul_model.hpp"
#include "unit/onnx/load_helpers.hpp"
#include "unit/store/scratch_dir.hpp"

#include <doctest/doctest.h>

#include <new>
#include <string>
#include <vector>

using namespace ballast;
using namespace ballast::testing;

namespace {

enum class Way { batch, one_by_one };

// Every planned value derived, then read back into `out` (sized by the
// caller beforehand, so that only the library allocates meanwhile).
Status derive_all(GpuBackend& gpu, const DeriveContext& ctx, const std::vector<PlannedDerivation>& plan, Way way,
                  std::vector<DerivedValue>& values, std::vector<std::vector<std::byte>>& out) {
  values.clear();  // capacity kept: reserved by the caller
  if (way == Way::batch) {
    BALLAST_ASSIGN_OR_RETURN(auto all, derive_weights(ctx, plan));
    values.swap(all);
  } else {
    for (const PlannedDerivation& p : plan) {
      BALLAST_ASSIGN_OR_RETURN(auto v, derive_weight(ctx, p));
      values.push_back(v);
    }
  }
  for (std::size_t i = 0; i < plan.size(); ++i) {
    DerivationLaunch l = plan[i].launch;
    BALLAST_ASSIGN_OR_RETURN(auto sizes, derivation_sizes(l));
    const std::span<std::byte> all(out[i]);
    BALLAST_RETURN_IF_ERROR(gpu.copy_to_host(all.first(sizes.dst_bytes), values[i].first, 0));
    if (sizes.dst2_bytes != 0)
      BALLAST_RETURN_IF_ERROR(gpu.copy_to_host(all.subspan(sizes.dst_bytes), values[i].second, 0));
  }
  return Status();
}

std::vector<std::vector<std::byte>> buffers_for(const std::vector<PlannedDerivation>& plan) {
  std::vector<std::vector<std::byte>> out;
  for (const PlannedDerivation& p : plan) {
    DerivationLaunch l = p.launch;
    auto sizes = derivation_sizes(l);
    REQUIRE(sizes.ok());
    out.emplace_back(sizes->dst_bytes + sizes->dst2_bytes);
  }
  return out;
}

}  // namespace

TEST_CASE("each host allocation of the derive path failing in turn: the same objects derive right afterwards") {
  using test_models::OrphanedPrefixModel;
  ScratchDir dir("derive-alloc-failure");
  const auto files = OrphanedPrefixModel::write(dir.path());
  auto from_file = load_onnx(files.onnx);
  REQUIRE_MESSAGE(from_file.ok(), from_file.error().to_string());
  const Model inline_weights = test_models::inline_matmul_model();
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  GpuBackend& backend = **gpu;
  for (const Model* m : std::initializer_list<const Model*>{&*from_file, &inline_weights}) {
    const std::string model_name = m == &inline_weights ? "inline weights (uploaded)" : "a registered data file";
    CAPTURE(model_name);
    auto plan = plan_derivations(*m);
    REQUIRE(plan.ok());
    REQUIRE_FALSE(plan->empty());
    const AllocationCounters baseline = backend.counters();

    for (Way way : {Way::batch, Way::one_by_one}) {
      const std::string way_name = way == Way::batch ? "derive_weights" : "derive_weight per entry";
      CAPTURE(way_name);
      std::vector<std::vector<std::byte>> clean;
      std::size_t clean_entries = 0;
      std::uint64_t clean_bytes = 0;
      AllocationCounters clean_live;
      {
        DeviceWeights sources(backend, m->store());
        DerivedWeights memo;
        std::vector<DerivedValue> values;
        clean = buffers_for(*plan);
        const Status s = derive_all(backend, DeriveContext{backend, *m, sources, memo}, *plan, way, values, clean);
        REQUIRE_MESSAGE(s.ok(), s.to_string());
        clean_entries = memo.len();
        clean_bytes = memo.bytes();
        clean_live = backend.counters();
        REQUIRE(memo.release(backend).status.ok());
        REQUIRE(sources.release(backend).status.ok());
      }
      int runs_failed = 0;
      for (long n = 0; n < 100000; ++n) {
        CAPTURE(n);
        DeviceWeights sources(backend, m->store());
        DerivedWeights memo;
        const DeriveContext ctx{backend, *m, sources, memo};
        std::vector<DerivedValue> values;
        values.reserve(plan->size());
        std::vector<std::vector<std::byte>> got = buffers_for(*plan);
        t_failed = false;
        t_allocations_left = n;
        bool threw = false;
        Status first;
        try {
          first = derive_all(backend, ctx, *plan, way, values, got);
        } catch (const std::bad_alloc&) {
          threw = true;
        }
        t_allocations_left = -1;
        const bool failed = t_failed;
        CHECK_FALSE(threw);  // an error value, never an exception across the API
        CHECK((failed || first.ok()));
        if (!first.ok()) CHECK_MESSAGE(first.code() == ErrorCode::out_of_memory, first.to_string());
        const Status again = derive_all(backend, ctx, *plan, way, values, got);
        REQUIRE_MESSAGE(again.ok(), again.to_string());
        CHECK(got == clean);
        CHECK(memo.len() == clean_entries);
        CHECK(memo.bytes() == clean_bytes);
        // A registration refused for want of host memory falls back to
        // uploading that file (residency() says why): more allocations.
        if (sources.residency().fallback_reason.empty())
          CHECK_MESSAGE(same_live(backend.counters(), clean_live),
                        live_text(backend.counters())
                            << " after a clean run: " << live_text(clean_live) << "; threw " << threw
                            << ", first: " << first.to_string() << "; " << sources.residency().fallback_reason);
        const Released mr = memo.release(backend);
        const Released sr = sources.release(backend);
        CHECK_MESSAGE(mr.status.ok(), mr.status.to_string());
        CHECK_MESSAGE(sr.status.ok(), sr.status.to_string());
        CHECK_MESSAGE(same_live(backend.counters(), baseline), live_text(backend.counters())
                                                                   << " at first: " << live_text(baseline));
        if (!failed) break;
        ++runs_failed;
      }
      MESSAGE(runs_failed << " runs with an allocation failed");
      CHECK(runs_failed > 5);
    }
  }
}

TEST_CASE(
    "each host allocation of DeviceWeights::resolve failing in turn: an error, never an exception, nothing left") {
  using test_models::OrphanedPrefixModel;
  ScratchDir dir("resolve-alloc-failure");
  const auto files = OrphanedPrefixModel::write(dir.path());
  auto from_file = load_onnx(files.onnx);
  REQUIRE_MESSAGE(from_file.ok(), from_file.error().to_string());
  const Model inline_weights = test_models::inline_matmul_model();
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  GpuBackend& backend = **gpu;
  const AllocationCounters baseline = backend.counters();
  for (const Model* m : std::initializer_list<const Model*>{&*from_file, &inline_weights}) {
    std::vector<ValueId> ids;
    for (const auto& [id, ref] : m->store().weights()) ids.push_back(id);
    int runs_failed = 0;
    for (long n = 0; n < 100000; ++n) {
      CAPTURE(n);
      DeviceWeights sources(backend, m->store());
      std::vector<Result<DevicePtr>> got;
      got.reserve(ids.size());
      t_failed = false;
      t_allocations_left = n;
      bool threw = false;
      try {
        for (ValueId id : ids) got.push_back(sources.resolve(id));
      } catch (const std::bad_alloc&) {
        threw = true;
      }
      t_allocations_left = -1;
      CHECK_FALSE(threw);
      for (const auto& r : got)
        if (!r.ok()) CHECK_MESSAGE(r.status().code() == ErrorCode::out_of_memory, r.status().to_string());
      for (ValueId id : ids) {
        auto again = sources.resolve(id);
        CHECK_MESSAGE(again.ok(), again.status().to_string());
      }
      const Released out = sources.release(backend);
      CHECK_MESSAGE(out.status.ok(), out.status.to_string());
      CHECK(same_live(backend.counters(), baseline));
      if (!t_failed) break;
      ++runs_failed;
    }
    MESSAGE(runs_failed << " runs with an allocation failed");
    CHECK(runs_failed > 2);
  }
}
