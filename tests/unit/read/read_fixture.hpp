// Stores built by hand for the read path's tests: data files of a known
// pattern, mapped, with external weights placed exactly where a case wants
// them (overlapping, touching, with dead gaps), and a consumer that
// rebuilds each file from the chunks it is handed.
#pragma once

#include "support/text.hpp"
#include <ballast/read_plan.hpp>
#include <ballast/weight_store.hpp>

#include "unit/store/scratch_dir.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace ballast::testing {

// Byte i of file `seed`: differs between files and along a file, so a
// chunk from the wrong place never compares equal.
inline std::uint8_t pattern_byte(std::uint32_t seed, std::uint64_t i) {
  return static_cast<std::uint8_t>((i * 31 + (i >> 9) + seed * 101 + 7) & 0xff);
}

using ballast::testing::contains;

struct HandStore {
  explicit HandStore(std::string_view name) : dir(name) {}

  ScratchDir dir;
  WeightStore store;
  std::vector<std::filesystem::path> paths;  // by mapping id - 1
  std::uint32_t next_value = 1;

  // Writes `size` pattern bytes to `name`, flushed to storage (so the page
  // cache can be dropped), and maps it.
  MappingId file(const std::string& name, std::uint64_t size) {
    const auto seed = static_cast<std::uint32_t>(paths.size() + 1);
    std::vector<std::uint8_t> bytes(size);
    for (std::uint64_t i = 0; i < size; ++i) bytes[i] = pattern_byte(seed, i);
    const auto path = dir.write(name, bytes);
    const int fd = ::open(path.c_str(), O_RDONLY);
    REQUIRE(fd >= 0);
    ::fsync(fd);
    ::close(fd);
    auto id = store.map_external(path);
    REQUIRE(id.ok());
    paths.push_back(path);
    return *id;
  }

  // An external weight of mapping `m` over [offset, offset + length).
  ValueId weight(MappingId m, std::uint64_t offset, std::uint64_t length) {
    WeightRef w;
    w.dtype = DataType::uint8;
    w.dims = {static_cast<std::int64_t>(length)};
    w.storage = WeightRef::Storage::external;
    ExternalLocation loc;
    const auto& path = paths.at(m - 1);
    loc.file = std::make_shared<const ExternalFile>(ExternalFile{path.filename().string(), path});
    loc.offset = offset;
    loc.length = length;
    w.external = loc;
    const ValueId id{next_value++};
    REQUIRE(store.add(id, std::move(w)).ok());
    return id;
  }
};

// A consumer that keeps what it is handed: every chunk in order, and each
// file as rebuilt from them (with how often each byte came).
struct Collector {
  struct Seen {
    MappingId mapping;
    std::uint64_t offset, length;
  };
  std::vector<Seen> chunks;
  std::map<MappingId, std::vector<std::byte>> image;
  std::map<MappingId, std::vector<std::uint8_t>> times;

  explicit Collector(const WeightStore& store) {
    for (MappingId m = 1; m <= store.mapping_count(); ++m) {
      const auto bytes = store.mmap_full_bytes(m);
      image[m].assign(bytes ? bytes->size() : 0, std::byte{0});
      times[m].assign(bytes ? bytes->size() : 0, 0);
    }
  }

  Status operator()(const ReadChunk& c) {
    chunks.push_back({c.mapping, c.offset, c.bytes.size()});
    auto& img = image.at(c.mapping);
    auto& t = times.at(c.mapping);
    REQUIRE(c.offset + c.bytes.size() <= img.size());
    for (std::size_t i = 0; i < c.bytes.size(); ++i) {
      img[c.offset + i] = c.bytes[i];
      ++t[c.offset + i];
    }
    return Status();
  }

  std::function<Status(const ReadChunk&)> fn() {
    return [this](const ReadChunk& c) { return (*this)(c); };
  }

  // Every byte of the plan came exactly once, none outside it, each equal
  // to the mapping's; chunks came in plan order, each inside one range and
  // at most `chunk_bytes`; and each planned weight reads as store.bytes().
  void check(const WeightStore& store, const ReadPlan& plan, std::uint64_t chunk_bytes) const {
    std::uint64_t delivered = 0;
    for (const ReadPlanFile& f : plan.files()) {
      const auto& t = times.at(f.mapping);
      std::vector<std::uint8_t> planned(t.size(), 0);
      for (const ReadRange& r : f.ranges)
        for (std::uint64_t i = r.offset; i < r.offset + r.length; ++i) planned[i] = 1;
      std::uint64_t wrong = 0;
      for (std::size_t i = 0; i < t.size(); ++i) wrong += t[i] != planned[i];
      CHECK_MESSAGE(wrong == 0, f.path.string() << ": " << wrong << " bytes not delivered exactly as planned");
      const auto mapped = store.mmap_full_bytes(f.mapping);
      REQUIRE(mapped.has_value());
      for (const ReadRange& r : f.ranges)
        CHECK(std::equal(mapped->begin() + static_cast<std::ptrdiff_t>(r.offset),
                         mapped->begin() + static_cast<std::ptrdiff_t>(r.offset + r.length),
                         image.at(f.mapping).begin() + static_cast<std::ptrdiff_t>(r.offset)));
    }
    // Order: the plan's chunks, cut the way the header says, one by one.
    std::size_t k = 0;
    bool in_order = true;
    for (const ReadPlanFile& f : plan.files())
      for (const ReadRange& r : f.ranges)
        for (std::uint64_t at = 0; at < r.length; at += chunk_bytes, ++k) {
          const std::uint64_t len = std::min(chunk_bytes, r.length - at);
          if (k >= chunks.size() || chunks[k].mapping != f.mapping || chunks[k].offset != r.offset + at ||
              chunks[k].length != len)
            in_order = false;
          delivered += len;
        }
    CHECK(in_order);
    CHECK(k == chunks.size());
    CHECK(delivered == plan.bytes());
    for (const ReadPlanWeight& w : plan.weights()) {
      const auto bytes = store.bytes(store.weights().at(w.id));
      REQUIRE(bytes.has_value());
      CHECK(std::equal(bytes->begin(), bytes->end(),
                       image.at(w.mapping).begin() + static_cast<std::ptrdiff_t>(w.offset)));
    }
  }
};

}  // namespace ballast::testing
