// zero_copy registers only what the graph references (issue 17, part 1):
// the planner on its own (core/device/registration_plan.hpp), then
// DeviceWeights on the CPU backend, whose registration is the identity, so
// what was registered is observable as addresses.
#include <ballast/backend_registry.hpp>
#include <ballast/device_weights.hpp>
#include <ballast/onnx_loader.hpp>
#include <doctest/doctest.h>

#include "device/registration_plan.hpp"
#include "support/orphaned_prefix_model.hpp"
#include "unit/store/scratch_dir.hpp"

#include <algorithm>
#include <random>

using namespace ballast;
using device::plan_registrations;
using device::RegistrationPlanInput;

namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

RegistrationPlanInput input(std::vector<ByteRange> refs, std::uint64_t file_size, std::uint64_t split_gap,
                            std::uint64_t align = 1, std::uint64_t base = 1ull << 40) {
  RegistrationPlanInput in;
  in.referenced = std::move(refs);
  in.file_size = file_size;
  in.base_address = base;
  in.import_alignment = align;
  in.page_size = 4096;
  in.split_gap = split_gap;
  return in;
}

}  // namespace

TEST_CASE("plan: the hull of the referenced bytes, never the dead prefix or tail") {
  // A file with a dead prefix 8x its referenced bytes, and a dead tail.
  const auto plan = plan_registrations(
      input({{8 * kMiB, kMiB / 2}, {8 * kMiB + kMiB / 2 + 64, kMiB / 2 - 64}}, 10 * kMiB, kRegistrationSplitGap));
  REQUIRE(plan.size() == 1);
  CHECK(plan[0] == ByteRange{8 * kMiB, kMiB});  // the 64-byte hole inside is kept: one registration
}

TEST_CASE("plan: a dead gap splits exactly at the threshold") {
  const std::uint64_t gap = 64 * kMiB;
  SUBCASE("gap == threshold: two ranges") {
    const auto plan = plan_registrations(input({{0, 4096}, {4096 + gap, 4096}}, 4096 * 2 + gap, gap));
    REQUIRE(plan.size() == 2);
    CHECK(plan[0] == ByteRange{0, 4096});
    CHECK(plan[1] == ByteRange{4096 + gap, 4096});
  }
  SUBCASE("gap one byte shorter: one range") {
    const auto plan = plan_registrations(input({{0, 4096}, {4096 + gap - 1, 4096}}, 4096 * 2 + gap, gap));
    REQUIRE(plan.size() == 1);
    CHECK(plan[0] == ByteRange{0, 4096 + gap - 1 + 4096});
  }
  SUBCASE("the named default is 64 MiB") { CHECK(kRegistrationSplitGap == 64 * kMiB); }
}

TEST_CASE("plan: ranges widened to the import alignment by address, clamped to the mapping") {
  // base is 4096-aligned but not 64 KiB-aligned: widening follows the address.
  const std::uint64_t base = (1ull << 40) + 4096;
  const std::uint64_t a = 64 * 1024;
  const auto plan = plan_registrations(input({{100, 10}, {10 * kMiB + 5, 7}}, 10 * kMiB + 100, kMiB, a, base));
  REQUIRE(plan.size() == 2);
  // First: starts at the mapping (the aligned address lies before it), ends on a 64 KiB address.
  CHECK(plan[0].offset == 0);
  CHECK((base + plan[0].offset + plan[0].length) % a == 0);
  CHECK(plan[0].length == a - 4096);
  // Second: starts on a 64 KiB address, ends at the end of the mapping (clamped).
  CHECK((base + plan[1].offset) % a == 0);
  CHECK(plan[1].offset + plan[1].length == 10 * kMiB + 100);
}

TEST_CASE("plan: ranges that would share a host page are one registration") {
  // Split gap lowered to 16 bytes; the two ranges are 100 bytes apart, in one page.
  const auto plan = plan_registrations(input({{0, 100}, {200, 100}, {3 * 4096, 10}}, 4 * 4096, 16));
  REQUIRE(plan.size() == 2);
  CHECK(plan[0] == ByteRange{0, 300});
  CHECK(plan[1] == ByteRange{3 * 4096, 10});
}

TEST_CASE("plan: a range ending exactly on a page boundary shares no page with one starting in the next") {
  // [0, 4096) ends where page 1 begins; the next range starts inside page
  // 1, 16 bytes on: no page in common, and the gap (16) is below the split
  // gap only if the split gap says so. With a split gap of 8 they stay two.
  const auto apart = plan_registrations(input({{0, 4096}, {4096 + 16, 100}}, 3 * 4096, 8));
  REQUIRE(apart.size() == 2);
  CHECK(apart[0] == ByteRange{0, 4096});
  CHECK(apart[1] == ByteRange{4096 + 16, 100});
  // One byte longer, the first range's last byte is in page 1: one registration.
  const auto shared = plan_registrations(input({{0, 4097}, {4096 + 16, 100}}, 3 * 4096, 8));
  REQUIRE(shared.size() == 1);
  CHECK(shared[0] == ByteRange{0, 4096 + 16 + 100});
}

TEST_CASE("plan: every referenced range lies wholly inside one planned range; nothing outside the file") {
  std::mt19937_64 rng(17);
  for (int round = 0; round < 500; ++round) {
    const std::uint64_t file_size = 1 + rng() % (8 * kMiB);
    std::vector<ByteRange> refs;
    std::uint64_t at = rng() % 4096;
    while (at < file_size) {
      const std::uint64_t len = std::min<std::uint64_t>(1 + rng() % 65536, file_size - at);
      refs.push_back({at, len});
      at += len + 1 + (rng() % 3 == 0 ? rng() % (2 * kMiB) : rng() % 9000);
    }
    const std::uint64_t align = std::uint64_t{1} << (rng() % 17);
    const std::uint64_t gap = rng() % (kMiB);
    const std::uint64_t base = (std::uint64_t{1} << 40) + 4096 * (rng() % 1024);
    const auto plan = plan_registrations(input(refs, file_size, gap, align, base));
    std::uint64_t registered = 0, referenced = 0;
    for (std::size_t i = 0; i < plan.size(); ++i) {
      REQUIRE(plan[i].length > 0);
      REQUIRE(plan[i].offset + plan[i].length <= file_size);
      if (i > 0) REQUIRE(plan[i - 1].offset + plan[i - 1].length < plan[i].offset);
      registered += plan[i].length;
    }
    for (const ByteRange& r : refs) {
      referenced += r.length;
      const bool inside = std::any_of(plan.begin(), plan.end(), [&](const ByteRange& p) {
        return p.offset <= r.offset && r.offset + r.length <= p.offset + p.length;
      });
      REQUIRE_MESSAGE(inside, "round " << round << ": [" << r.offset << ", +" << r.length << ") not inside one range");
    }
    CHECK(registered >= referenced);
  }
}

TEST_CASE("plan: no range outgrows the backend's largest single allocation (split between weights)") {
  // 64 contiguous 1 MiB weights, 4 KiB import alignment, a 10 MiB limit
  // (lavapipe's is 2 GiB: a 4 GiB model's one hull would be refused whole).
  std::vector<ByteRange> refs;
  for (std::uint64_t i = 0; i < 64; ++i) refs.push_back({i * kMiB, kMiB});
  RegistrationPlanInput in = input(refs, 64 * kMiB, kRegistrationSplitGap, 4096);
  in.max_range = 10 * kMiB;
  const auto plan = plan_registrations(in);
  CHECK(plan.size() >= 7);
  for (const ByteRange& r : plan) CHECK(r.length <= in.max_range);
  for (const ByteRange& ref : refs) {
    const bool inside_one = std::any_of(plan.begin(), plan.end(), [&](const ByteRange& r) {
      return r.offset <= ref.offset && ref.offset + ref.length <= r.offset + r.length;
    });
    CHECK_MESSAGE(inside_one, "weight at " << ref.offset);
  }
  SUBCASE("without a limit: one range") {
    in.max_range = 0;
    CHECK(plan_registrations(in).size() == 1);
  }
  SUBCASE("a weight longer than the limit stays whole, in a range of its own") {
    in.referenced = {{0, kMiB}, {kMiB, 12 * kMiB}, {13 * kMiB, kMiB}};
    const auto big = plan_registrations(in);
    REQUIRE(big.size() == 3);
    CHECK(big[1] == ByteRange{kMiB, 12 * kMiB});
  }
}

TEST_CASE("plan: an empty range, or one at the end of the file, adds nothing; one past the end is clipped") {
  // Each of these alone would drag the hull to its offset.
  const auto plan = plan_registrations(input({{100, 0}, {4096, 4096}, {16384, 4096}}, 16384, kRegistrationSplitGap));
  REQUIRE(plan.size() == 1);
  CHECK(plan[0] == ByteRange{4096, 4096});
  const auto clipped = plan_registrations(input({{8192, 16384}}, 16384, kRegistrationSplitGap));
  REQUIRE(clipped.size() == 1);
  CHECK(clipped[0] == ByteRange{8192, 8192});
}

TEST_CASE("plan: no referenced bytes, nothing to register") { CHECK(plan_registrations(input({}, 4096, 0)).empty()); }

TEST_CASE("DeviceWeights registers the orphaned-prefix model's live half only") {
  testing::ScratchDir dir("orphaned_prefix_dw");
  const auto files = test_models::OrphanedPrefixModel::write(dir.path());
  using M = test_models::OrphanedPrefixModel;
  auto model = load_onnx(files.onnx);
  REQUIRE_MESSAGE(model.ok(), model.status().to_string());
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  const AllocationCounters before = (*gpu)->counters();
  {
    DeviceWeights dw(**gpu, model->store());
    for (ValueId id : model->weight_order()) {
      auto ptr = dw.resolve(id);
      REQUIRE_MESSAGE(ptr.ok(), ptr.status().to_string());
      auto bytes = model->store().bytes(model->store().weights().at(id));
      REQUIRE(bytes.has_value());
      CHECK(*ptr == reinterpret_cast<DevicePtr>(bytes->data()));  // read in place
    }
    const WeightResidency r = dw.residency();
    CHECK(r.registered_files == 1);
    CHECK(r.registered_ranges == 1);
    CHECK(r.registered_bytes == M::kReferenced);  // CPU import alignment 1: exactly the live half
    CHECK(r.referenced_bytes == M::kReferenced);
    CHECK(r.mapped_bytes == M::kFileBytes);
    CHECK(r.uploaded_weights == 0);
    CHECK((*gpu)->counters().live_registrations == before.live_registrations + 1);
  }
  CHECK((*gpu)->counters().live_registrations == before.live_registrations);
}

TEST_CASE("DeviceWeights splits a file at a large dead gap (threshold lowered through the options)") {
  testing::ScratchDir dir("split_dw");
  const std::uint64_t size = 3 * kMiB;
  const auto path = dir.write_pattern("w.bin", size);
  WeightStore store;
  auto mapping = store.map_external(path);
  REQUIRE(mapping.ok());
  auto external = [&](std::uint64_t offset, std::uint64_t length) {
    WeightRef w;
    w.dtype = DataType::uint8;
    w.dims = {static_cast<std::int64_t>(length)};
    w.storage = WeightRef::Storage::external;
    ExternalLocation loc;
    loc.file = std::make_shared<const ExternalFile>(ExternalFile{"w.bin", path});
    loc.offset = offset;
    loc.length = length;
    w.external = loc;
    return w;
  };
  REQUIRE(store.add(ValueId{0}, external(4096, 8192)).ok());         // range A
  REQUIRE(store.add(ValueId{1}, external(4096 + 8192, 5000)).ok());  // range A, adjacent
  REQUIRE(store.add(ValueId{2}, external(2 * kMiB, 4096)).ok());     // range B, after a ~2 MiB dead gap
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  const std::uint64_t baseline = (*gpu)->counters().live_registrations;
  for (std::uint64_t gap : {kRegistrationSplitGap, kMiB}) {
    CAPTURE(gap);
    DeviceWeightsOptions options;
    options.split_gap_bytes = gap;
    DeviceWeights dw(**gpu, store, options);
    const auto whole = store.mmap_full_bytes(*mapping);
    REQUIRE(whole.has_value());
    for (ValueId id : {ValueId{0}, ValueId{1}, ValueId{2}}) {
      auto ptr = dw.resolve(id);
      REQUIRE(ptr.ok());
      CHECK(*ptr == reinterpret_cast<DevicePtr>(whole->data()) + store.weights().at(id).external->offset);
    }
    const WeightResidency r = dw.residency();
    CHECK(r.registered_files == 1);
    CHECK(r.referenced_bytes == 8192 + 5000 + 4096);
    if (gap == kRegistrationSplitGap) {
      CHECK(r.registered_ranges == 1);
      CHECK(r.registered_bytes == 2 * kMiB);  // the hull [4096, 2 MiB + 4096)
    } else {
      CHECK(r.registered_ranges == 2);
      CHECK(r.registered_bytes == 8192 + 5000 + 4096);
    }
    CHECK((*gpu)->counters().live_registrations == baseline + r.registered_ranges);
    CHECK(dw.release(**gpu).status.ok());
    CHECK((*gpu)->counters().live_registrations == baseline);
  }
}
