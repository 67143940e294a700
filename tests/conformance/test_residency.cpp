// Residency on the backend under test (issue 17, part 1): zero_copy
// registers only the referenced bytes of a data file, each weight stays
// contiguous inside one registration, and the auto budget counts what the
// graph references, never the file length. Inputs are written here, in C++.
#include "conformance/conformance.hpp"

#include <ballast/device_weights.hpp>
#include <ballast/onnx_loader.hpp>
#include <ballast/residency.hpp>
#include <ballast/weight_store.hpp>

#include <support/orphaned_prefix_model.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <unistd.h>

using namespace ballast;
namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t kKiB = 1024;
constexpr std::uint64_t kMiB = kKiB * kKiB;

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) {
    path = fs::temp_directory_path() / ("ballast_conformance_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

bool registers(const GpuBackend& g) {
  return g.capabilities().host_registration && g.capabilities().read_only_registration;
}

// A data file with a dead prefix, a live range A, a 2 MiB dead gap and a
// live range B; float32 weights, one straddling the middle of range A.
struct SplitStore {
  TempDir dir{"residency_split"};
  WeightStore store;
  static constexpr std::uint64_t kA = 64 * kKiB, kAEnd = 256 * kKiB;  // range A [64 KiB, 256 KiB)
  static constexpr std::uint64_t kB = kAEnd + 2 * kMiB, kBEnd = kB + 64 * kKiB;
  static constexpr std::uint64_t kMiddle = (kA + kAEnd) / 2;
  std::vector<std::byte> file_bytes = conformance::random_bytes(kBEnd + 4096, 31);
  ValueId first{0}, straddle{1}, last{2}, far{3};

  SplitStore() {
    std::ofstream(dir.path / "w.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(file_bytes.data()), static_cast<std::streamsize>(file_bytes.size()));
    REQUIRE(store.map_external(dir.path / "w.bin").ok());
    REQUIRE(store.add(first, external(kA, 4096)).ok());
    REQUIRE(store.add(straddle, external(kMiddle - 10000, 20000)).ok());  // across the middle, across pages
    REQUIRE(store.add(last, external(kAEnd - 4096, 4096)).ok());
    REQUIRE(store.add(far, external(kB + 100 * 4, 60 * kKiB - 400)).ok());
  }
  WeightRef external(std::uint64_t offset, std::uint64_t length) {
    WeightRef w;
    w.dtype = DataType::float32;
    w.dims = {static_cast<std::int64_t>(length / 4)};
    w.storage = WeightRef::Storage::external;
    ExternalLocation loc;
    loc.file = std::make_shared<const ExternalFile>(ExternalFile{"w.bin", fs::canonical(dir.path / "w.bin")});
    loc.offset = offset;
    loc.length = length;
    w.external = loc;
    return w;
  }
  std::vector<std::byte> slice(std::uint64_t offset, std::uint64_t length) const {
    return {file_bytes.begin() + static_cast<std::ptrdiff_t>(offset),
            file_bytes.begin() + static_cast<std::ptrdiff_t>(offset + length)};
  }
};

}  // namespace

TEST_CASE("residency: a weight straddling the middle of a registered range is contiguous for its full length") {
  conformance::LeakCheck leaks;
  SplitStore s;
  GpuBackend& g = conformance::gpu();
  DeviceWeightsOptions options;
  options.split_gap_bytes = 1 * kMiB;  // lowered: the 2 MiB dead gap splits the file in two
  options.register_unguarded = true;   // the layout is the point here, and nothing truncates the file
  DeviceWeights dw(g, s.store, options);
  std::map<ValueId, DevicePtr> ptrs;
  for (ValueId id : {s.first, s.straddle, s.last, s.far}) {
    auto ptr = dw.resolve(id);
    REQUIRE_MESSAGE(ptr.ok(), conformance::describe(ptr.status()));
    ptrs[id] = *ptr;
    const auto& loc = *s.store.weights().at(id).external;
    const auto seen = conformance::download(*ptr, loc.length);
    CHECK_MESSAGE(seen == s.slice(loc.offset, loc.length), "weight at offset " << loc.offset << " read back wrong");
  }
  const WeightResidency r = dw.residency();
  if (registers(g) && r.fallback_files == 0) {
    REQUIRE(r.registered_files == 1);
    CHECK(r.registered_ranges == 2);
    CHECK(r.uploaded_weights == 0);
    CHECK(r.referenced_bytes == 4096 + 20000 + 4096 + (60 * kKiB - 400));
    // Range A is one registration: its weights sit at their file distance
    // from each other, and the whole of it reads back in one piece.
    CHECK(ptrs[s.straddle] - ptrs[s.first] == SplitStore::kMiddle - 10000 - SplitStore::kA);
    CHECK(ptrs[s.last] - ptrs[s.first] == SplitStore::kAEnd - 4096 - SplitStore::kA);
    const auto whole_a = conformance::download(ptrs[s.first], SplitStore::kAEnd - SplitStore::kA);
    CHECK(whole_a == s.slice(SplitStore::kA, SplitStore::kAEnd - SplitStore::kA));
    // Neither the dead prefix nor the 2 MiB dead gap: the two hulls, each
    // widened by less than one import alignment at either end.
    const std::uint64_t a = g.capabilities().import_alignment;
    const std::uint64_t hulls = (SplitStore::kAEnd - SplitStore::kA) + (60 * kKiB - 400);
    CHECK(r.registered_bytes >= hulls);
    CHECK(r.registered_bytes <= hulls + 2 * a * r.registered_ranges);
  } else {
    CHECK(r.registered_files == 0);
    CHECK(r.uploaded_weights == 4);
    CHECK_FALSE(r.fallback_reason.empty());
  }
  Released released = dw.release(g);
  CHECK_MESSAGE(released.status.ok(), conformance::describe(released.status));
}

TEST_CASE("residency: the orphaned-prefix model registers its referenced bytes, not the prefix") {
  using M = test_models::OrphanedPrefixModel;
  conformance::LeakCheck leaks;
  TempDir dir("residency_orphaned");
  const M files = M::write(dir.path);
  auto model = load_onnx(files.onnx);
  REQUIRE_MESSAGE(model.ok(), conformance::describe(model.status()));
  GpuBackend& g = conformance::gpu();
  DeviceWeightsOptions options;
  options.register_unguarded = true;  // the layout is the point here, and nothing truncates the file
  DeviceWeights dw(g, model->store(), options);
  for (ValueId id : model->weight_order()) {
    auto ptr = dw.resolve(id);
    REQUIRE_MESSAGE(ptr.ok(), conformance::describe(ptr.status()));
    auto expected = model->store().bytes(model->store().weights().at(id));
    REQUIRE(expected.has_value());
    const auto seen = conformance::download(*ptr, expected->size());
    CHECK(std::equal(seen.begin(), seen.end(), expected->begin(), expected->end()));
  }
  const WeightResidency r = dw.residency();
  const std::uint64_t a = g.capabilities().import_alignment;
  MESSAGE("registered " << r.registered_bytes << " bytes in " << r.registered_ranges << " range(s) for "
                        << r.referenced_bytes << " referenced of " << r.mapped_bytes << " mapped (import alignment "
                        << a << ")");
  if (registers(g) && r.fallback_files == 0) {
    CHECK(r.registered_files == 1);
    CHECK(r.registered_ranges == 1);
    CHECK(r.referenced_bytes == M::kReferenced);
    CHECK(r.mapped_bytes == M::kFileBytes);
    CHECK(r.registered_bytes >= M::kReferenced);
    CHECK(r.registered_bytes <= M::kReferenced + a * r.registered_ranges);
    if (a <= 4096) CHECK(r.registered_bytes < M::kFileBytes);  // the prefix is not pinned
  } else {
    CHECK(r.registered_bytes == 0);
    CHECK(r.uploaded_bytes == M::kReferenced);
  }
  Released released = dw.release(g);
  CHECK_MESSAGE(released.status.ok(), conformance::describe(released.status));
}

TEST_CASE("residency: the orphaned-prefix model's auto budget excludes the prefix, exactly") {
  using M = test_models::OrphanedPrefixModel;
  TempDir dir("residency_budget");
  const M files = M::write(dir.path);
  auto model = load_onnx(files.onnx);
  REQUIRE_MESSAGE(model.ok(), conformance::describe(model.status()));
  auto b = auto_budget(*model);
  REQUIRE_MESSAGE(b.ok(), conformance::describe(b.status()));
  CHECK(b->source_bytes == M::kReferenced);
  CHECK(b->derived_bytes == M::kDerived);
  CHECK(b->total == M::kReferenced + M::kDerived);
  CHECK(b->total == M::kFileBytes - M::kPrefix + M::kDerived);
}
