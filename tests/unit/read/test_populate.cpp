// populate_mapping puts a mapping's pages in the page cache ahead of use;
// drop_page_cache takes a store's files out of it. mincore(2) on the
// mapping tells which pages the cache holds.
#include <ballast/read_plan.hpp>

#include "unit/read/read_fixture.hpp"

#include <sys/mman.h>
#include <unistd.h>

using namespace ballast;
using namespace ballast::testing;

namespace {

const std::uint64_t kPage = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));

// Pages of [offset, offset + length) of the mapping resident in memory;
// SIZE_MAX when mincore is not available.
std::size_t resident_pages(Bytes mapping, std::uint64_t offset, std::uint64_t length) {
  std::vector<unsigned char> vec((length + kPage - 1) / kPage);
  auto* start = const_cast<std::byte*>(mapping.data()) + offset;
  if (::mincore(start, length, vec.data()) != 0) return SIZE_MAX;
  std::size_t n = 0;
  for (unsigned char v : vec) n += v & 1u;
  return n;
}

// Drops `path` from the page cache (its pages are clean: HandStore synced them).
void drop(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

}  // namespace

TEST_CASE("populate_mapping makes the ranges' pages resident, on several threads") {
  HandStore h("read-populate");
  const MappingId a = h.file("a.bin", 64 * kPage);
  drop(h.paths[0]);
  const Bytes mapping = *h.store.mmap_full_bytes(a);
  const std::size_t before = resident_pages(mapping, 0, mapping.size());
  if (before == SIZE_MAX) {
    MESSAGE("skipped: mincore is not available");
    return;
  }
  if (before != 0) MESSAGE("the file system kept " << before << " pages after DONTNEED");
  // Two ranges, not page-aligned, cut into one-page pieces over 4 threads.
  const std::vector<ReadRange> ranges{{3 * kPage + 5, 10 * kPage}, {40 * kPage, 8 * kPage - 1}};
  auto populated = populate_mapping(h.store, a, ranges, 4, kPage);
  REQUIRE_MESSAGE(populated.ok(), populated.status().to_string());
  CHECK(*populated == 18 * kPage - 1);
  CHECK(resident_pages(mapping, 3 * kPage, 11 * kPage) == 11);  // the partial pages at both ends too
  CHECK(resident_pages(mapping, 40 * kPage, 8 * kPage) == 8);
  // (Pages between may be resident too: the kernel reads ahead around a fault.)

  // Overlapping ranges count once; none is nothing.
  auto twice = populate_mapping(h.store, a, std::vector<ReadRange>{{0, 100}, {50, 100}});
  REQUIRE(twice.ok());
  CHECK(*twice == 150);
  CHECK(*populate_mapping(h.store, a, {}) == 0);

  // Outside the file, or no such mapping: refused.
  CHECK(populate_mapping(h.store, a, std::vector<ReadRange>{{60 * kPage, 5 * kPage}}).code() ==
        ErrorCode::out_of_bounds);
  CHECK(populate_mapping(h.store, 9, std::vector<ReadRange>{{0, 1}}).code() == ErrorCode::not_found);
}

TEST_CASE("populate_mapping of a truncated file: an io error naming it, no SIGBUS") {
  HandStore h("read-populate-truncated");
  const MappingId a = h.file("a.bin", 32 * kPage);
  drop(h.paths[0]);
  REQUIRE(::truncate(h.paths[0].c_str(), 4 * kPage) == 0);
  auto populated = populate_mapping(h.store, a, std::vector<ReadRange>{{0, 32 * kPage}});
  REQUIRE_FALSE(populated.ok());
  CHECK(populated.code() == ErrorCode::io);
  CHECK(populated.error().file == h.paths[0].string());
}

TEST_CASE("drop_page_cache takes every mapped file out of the page cache") {
  HandStore h("read-drop");
  const MappingId a = h.file("a.bin", 16 * kPage);
  const MappingId b = h.file("b.bin", 8 * kPage);
  // Read both through descriptors (the mappings are never touched, so
  // no page is held mapped by this process).
  for (const auto& path : h.paths) {
    std::vector<char> buf(16 * kPage);
    const int fd = ::open(path.c_str(), O_RDONLY);
    REQUIRE(fd >= 0);
    REQUIRE(::pread(fd, buf.data(), buf.size(), 0) > 0);
    ::close(fd);
  }
  const Bytes ma = *h.store.mmap_full_bytes(a);
  const Bytes mb = *h.store.mmap_full_bytes(b);
  if (resident_pages(ma, 0, ma.size()) == SIZE_MAX) {
    MESSAGE("skipped: mincore is not available");
    return;
  }
  CHECK(resident_pages(ma, 0, ma.size()) == 16);
  CHECK(resident_pages(mb, 0, mb.size()) == 8);
  REQUIRE(drop_page_cache(h.store).ok());
  CHECK(resident_pages(ma, 0, ma.size()) == 0);
  CHECK(resident_pages(mb, 0, mb.size()) == 0);

  // A file replaced since: refused, naming it.
  std::filesystem::rename(h.dir.write("b.new", std::vector<std::uint8_t>(10, 1)), h.paths[1]);
  const Status s = drop_page_cache(h.store);
  CHECK(s.code() == ErrorCode::io);
  CHECK(s.error().file == h.paths[1].string());
  std::filesystem::remove(h.paths[1]);
  CHECK(drop_page_cache(h.store).code() == ErrorCode::not_found);
}

// cached_bytes() checks each range against the file as this store mapped
// it: one that starts inside and runs past the end is refused as one that
// starts past it is (mincore would otherwise count the bytes of the last
// page past the file's end, or fail on the page after the mapping).
TEST_CASE("cached_bytes counts ranges inside the file; a range reaching past its end is refused") {
  HandStore h("read-cached");
  const std::uint64_t size = 4 * kPage + 100;  // the last page is part file, part past its end
  const MappingId a = h.file("a.bin", size);
  auto populated = populate_mapping(h.store, a, std::vector<ReadRange>{{0, size}});
  REQUIRE_MESSAGE(populated.ok(), populated.status().to_string());
  const Bytes mapping = *h.store.mmap_full_bytes(a);
  auto inside = cached_bytes(h.store, a, std::vector<ReadRange>{{0, size}, {kPage + 3, 10}, {size - 1, 1}, {size, 0}});
  REQUIRE_MESSAGE(inside.ok(), inside.status().to_string());
  if (resident_pages(mapping, 0, size) == 5)
    CHECK(*inside == size + 11);
  else
    MESSAGE("the page cache did not keep the populated pages: the count is not checked");
  const ReadRange outside[] = {{size - 10, 11}, {size - 10, 200}, {size, 1},
                               {0, size + 1},   {size + 1, 1},    {size - 10, UINT64_MAX}};
  for (const ReadRange& r : outside) {
    CAPTURE(r.offset);
    CAPTURE(r.length);
    auto got = cached_bytes(h.store, a, std::vector<ReadRange>{{0, 1}, r});
    REQUIRE_FALSE(got.ok());
    CHECK(got.code() == ErrorCode::out_of_bounds);
    CHECK_MESSAGE(contains(got.status().to_string(), "a range lies outside " + h.paths[0].string()),
                  got.status().to_string());
  }
  CHECK(cached_bytes(h.store, 9, std::vector<ReadRange>{{0, 1}}).code() == ErrorCode::not_found);
}
