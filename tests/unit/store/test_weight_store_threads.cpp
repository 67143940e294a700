#include <ballast/weight_store.hpp>

#include "unit/store/scratch_dir.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <thread>
#include <vector>

using namespace ballast;
using ballast::testing::ScratchDir;

TEST_CASE("const WeightStore queries run concurrently with each other and with map_external") {
  ScratchDir dir("store-threads");
  auto blob = dir.write_pattern("blob.bin", 1 << 16);
  std::vector<std::filesystem::path> extra;
  for (int i = 0; i < 8; ++i) extra.push_back(dir.write_pattern("extra" + std::to_string(i) + ".bin", 128));

  WeightStore store;
  REQUIRE(store.map_external(blob).ok());
  for (std::uint32_t i = 0; i < 64; ++i) {
    WeightRef w;
    w.dtype = DataType::uint8;
    w.storage = WeightRef::Storage::external;
    ExternalLocation loc;
    loc.file = std::make_shared<const ExternalFile>(ExternalFile{"blob", blob});
    loc.offset = i * 1024;
    loc.length = 1024 + (i % 3) * 512;  // overlapping neighbours
    w.external = loc;
    REQUIRE(store.add(ValueId{i}, w).ok());
  }
  const std::uint64_t expected_total = std::uint64_t{1} << 16;

  std::atomic<int> failures{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&] {
      for (int round = 0; round < 50; ++round) {
        for (const auto& [id, w] : store.weights())
          if (!store.bytes(w) && w.external->offset + w.external->length <= expected_total) ++failures;
        auto ref = store.referenced_weight_bytes();
        if (ref.files.empty() || ref.files[0].referenced_bytes != expected_total) ++failures;
        (void)store.dead_ranges(ref);
        (void)store.unreferenced_external_bytes(ref);
        (void)store.mapping_for(blob);
      }
    });
  }
  std::thread writer([&] {
    for (const auto& p : extra)
      if (!store.map_external(p).ok()) ++failures;
  });
  for (auto& t : readers) t.join();
  writer.join();
  CHECK(failures.load() == 0);
  CHECK(store.mapping_count() == 9);
}
