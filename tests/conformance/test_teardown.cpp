// Issue 4's teardown proof on real backend allocations: a DerivedWeights
// memo filled through the backend gives every byte back via its TeardownHost.
#include "conformance/conformance.hpp"
#include "conformance/derivation_runner.hpp"

#include <ballast/derived_weights.hpp>
#include <ballast/model_resource.hpp>

#include <type_traits>
#include <vector>

using namespace conformance;
using ballast::DataType;
using ballast::DerivationLaunch;
using ballast::DerivedPair;
using ballast::DerivationKey;

namespace {
DerivationKey key_of(ballast::DevicePtr source) {
  DerivationKey k;
  k.source = source;
  return k;
}
}  // namespace
using ballast::DerivedPtr;
using ballast::DerivedWeights;
using ballast::Result;
namespace derive = ballast::derive;

namespace {

// Allocates and launches one derivation of `source`; frees what it made on
// failure, as the memo's build contract asks.
template <class Derived>
Result<Derived> build(DerivationLaunch l, DevicePtr source) {
  auto sizes = ballast::derivation_sizes(l);
  if (!sizes.ok()) return sizes.error();
  auto& g = gpu();
  auto dst = g.allocate(sizes->dst_bytes);
  if (!dst.ok()) return dst.error();
  DevicePtr second = 0;
  if (sizes->dst2_bytes > 0) {
    auto d2 = g.allocate(sizes->dst2_bytes);
    if (!d2.ok()) {
      static_cast<void>(g.free(*dst));
      return d2.error();
    }
    second = *d2;
  }
  l.src = source;
  l.dst = *dst;
  l.dst2 = second;
  ballast::Status s = g.launch(l);
  if (s.ok()) s = g.synchronize();
  if (!s.ok()) {
    static_cast<void>(g.free(*dst));
    if (second != 0) static_cast<void>(g.free(second));
    return s.error();
  }
  if constexpr (std::is_same_v<Derived, DerivedPair>) {
    return DerivedPair{{*dst, sizes->dst_bytes}, {second, sizes->dst2_bytes}};
  } else {
    return DerivedPtr{*dst, sizes->dst_bytes};
  }
}

}  // namespace

TEST_CASE("teardown: a DerivedWeights memo over backend allocations gives everything back") {
  LeakCheck leaks;
  auto& g = gpu();
  const auto baseline = g.counters();

  std::vector<DeviceBuffer> sources;
  for (std::uint64_t seed = 1; seed <= 4; ++seed) sources.push_back(upload(random_bytes(48 * 80 * 4, seed)));
  const auto with_sources = g.counters();

  std::uint64_t expected_bytes = 0;
  std::uint64_t expected_allocations = 0;
  {
    DerivedWeights memo("conformance memo");
    ballast::TeardownHost<ballast::GpuBackend> host;
    host.add(memo);

    for (const auto& src : sources) {
      DerivationLaunch t;
      t.kind = ballast::Derivation::transpose;
      t.src_type = DataType::float32;
      t.rows = 48;
      t.cols = 80;
      auto transposed = memo.get_or_build_ptr(derive::transpose, key_of(src.ptr()), [&] { return build<DerivedPtr>(t, src.ptr()); });
      REQUIRE_MESSAGE(transposed.ok(), describe(transposed.status()));
      // A second ask is a hit: nothing more is allocated.
      auto again = memo.get_or_build_ptr(derive::transpose, key_of(src.ptr()), [&] { return build<DerivedPtr>(t, src.ptr()); });
      REQUIRE(again.ok());
      CHECK(*again == *transposed);

      DerivationLaunch q = t;
      q.kind = ballast::Derivation::quant_int8;
      auto quantized = memo.get_or_build_pair(derive::quant_int8, key_of(src.ptr()), [&] { return build<DerivedPair>(q, src.ptr()); });
      REQUIRE_MESSAGE(quantized.ok(), describe(quantized.status()));

      DerivationLaunch h = t;
      h.kind = ballast::Derivation::to_f16;
      auto halves = memo.get_or_build_ptr(derive::to_f16, key_of(src.ptr()), [&] { return build<DerivedPtr>(h, src.ptr()); });
      REQUIRE_MESSAGE(halves.ok(), describe(halves.status()));

      expected_allocations += 4;  // transpose, to_f16, and the quant_int8 pair
      expected_bytes += 48 * 80 * 4 + 48 * 80 * 2 + 48 * 80 + 48 * 4;
    }
    CHECK(memo.len() == sources.size() * 3);
    CHECK(memo.bytes() == expected_bytes);
    CHECK(g.counters().live_allocations == with_sources.live_allocations + expected_allocations);

    const ballast::TeardownReport report = host.teardown(g);
    CHECK_MESSAGE(report.ok(), report.to_string());
    CHECK(report.allocations_freed() == expected_allocations);
    CHECK(report.bytes_freed() == expected_bytes);
    CHECK(memo.is_empty());
    // Every derived allocation is gone; the sources, which the memo never owns, remain.
    CHECK(g.counters().live_allocations == with_sources.live_allocations);
    CHECK(g.counters().live_bytes == with_sources.live_bytes);
  }
  sources.clear();
  CHECK(g.counters().live_allocations == baseline.live_allocations);
  CHECK(g.counters().live_bytes == baseline.live_bytes);
}
