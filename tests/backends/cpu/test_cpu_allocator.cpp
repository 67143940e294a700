// Allocation on the CPU backend: real aligned memory, errors instead of
// crashes, and counters that return to their baseline.
#include "cpu_test_support.hpp"

#include "cpu/allocator.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <cstdint>
#include <set>

using namespace ballast;
using cpu_test::open_cpu;

TEST_CASE("allocations are real, aligned and counted") {
  auto b = open_cpu();
  const auto base = b->counters();
  CHECK(base.live_allocations == 0);
  std::set<DevicePtr> seen;
  for (std::uint64_t align : {1ull, 2ull, 64ull, 256ull, 4096ull, 1ull << 21}) {
    for (std::uint64_t bytes : {0ull, 1ull, 7ull, 4097ull}) {
      auto p = b->allocate(bytes, align);
      REQUIRE_MESSAGE(p.ok(), p.error().to_string());
      CHECK(*p % align == 0);
      CHECK(seen.insert(*p).second);  // unique, zero bytes included
      if (bytes) std::memset(reinterpret_cast<void*>(*p), 0xab, bytes);  // really writable
    }
  }
  CHECK(b->counters().live_allocations == seen.size());
  CHECK(b->counters().live_bytes == 6 * (0 + 1 + 7 + 4097));
  for (DevicePtr p : seen) CHECK(b->free(p).ok());
  CHECK(b->counters().live_allocations == base.live_allocations);
  CHECK(b->counters().live_bytes == base.live_bytes);
}

TEST_CASE("bad frees are invalid_argument errors") {
  auto b = open_cpu();
  auto p = b->allocate(100);
  REQUIRE(p.ok());
  CHECK(b->free(*p + 8).code() == ErrorCode::invalid_argument);  // inside, not the start
  CHECK(b->free(*p).ok());
  const Status twice = b->free(*p);
  CHECK(twice.code() == ErrorCode::invalid_argument);
  CHECK(twice.to_string().find("not a live allocation") != std::string::npos);
  CHECK(b->free(0).code() == ErrorCode::invalid_argument);
  CHECK(b->free(0x1234).code() == ErrorCode::invalid_argument);
  CHECK(b->counters().live_allocations == 0);
}

TEST_CASE("impossible allocations are errors, never crashes") {
  auto b = open_cpu();
  const auto max = b->capabilities().max_single_allocation;
  REQUIRE(max > 0);
  auto huge = b->allocate(max + 1);
  CHECK(huge.code() == ErrorCode::out_of_memory);
  CHECK(huge.error().to_string().find("largest single allocation") != std::string::npos);
  CHECK(b->allocate(~0ull).code() == ErrorCode::out_of_memory);
  CHECK(b->allocate(16, 3).code() == ErrorCode::invalid_argument);
  CHECK(b->allocate(16, 1ull << 40).code() == ErrorCode::invalid_argument);
  CHECK(b->counters().live_allocations == 0);
}

TEST_CASE("device info and capabilities") {
  auto b = open_cpu();
  const DeviceInfo& info = b->info();
  CHECK(info.backend == "cpu");
  CHECK(info.index == 0);
  CHECK_FALSE(info.name.empty());
  CHECK(info.memory_bytes > 0);
  REQUIRE(info.uuid.size() == 40);
  CHECK(info.uuid.rfind("GPU-", 0) == 0);
  for (std::size_t i : {12u, 17u, 22u, 27u}) CHECK(info.uuid[i] == '-');
  CHECK(info.uuid == open_cpu()->info().uuid);  // stable
  const Capabilities& caps = b->capabilities();
  CHECK(caps.host_registration);
  CHECK(caps.read_only_registration);
  CHECK(caps.import_alignment == 1);
  CHECK(caps.max_single_allocation == info.memory_bytes);
  CHECK_FALSE(caps.flushes_f16_subnormals);
  CHECK_FALSE(caps.int8_codes_within_one);
  auto devices = cpu::plugin().devices();
  REQUIRE(devices.ok());
  REQUIRE(devices->size() == 1);
  CHECK((*devices)[0].uuid == info.uuid);
}

TEST_CASE("config: options, device index and UUID") {
  auto open = [](BackendConfig c) {
    c.name = "cpu";
    return cpu::plugin().open(c);
  };
  BackendConfig c;
  c.options["threads"] = "3";
  c.options["simd"] = "off";
  CHECK(open(c).ok());
  c.options["threads"] = "0";
  CHECK(open(c).code() == ErrorCode::invalid_argument);
  c.options["threads"] = "2x";
  CHECK(open(c).code() == ErrorCode::invalid_argument);
  c.options.clear();
  for (const char* bad : {"-1", "x", "1048577", "4k", ""}) {
    c.options["retain_mib"] = bad;
    auto refused = open(c);
    CHECK_MESSAGE(refused.code() == ErrorCode::invalid_argument, bad);
    if (!refused.ok()) CHECK(refused.error().to_string().find("retain_mib=") != std::string::npos);
  }
  for (const char* good : {"0", "1", "1048576"}) {
    c.options["retain_mib"] = good;
    CHECK_MESSAGE(open(c).ok(), good);
  }
  c.options.clear();
  c.options["colour"] = "blue";
  auto unknown = open(c);
  CHECK(unknown.code() == ErrorCode::invalid_argument);
  CHECK(unknown.error().to_string().find("known keys: threads, simd, retain_mib") != std::string::npos);

  BackendConfig d;
  d.device_index = 1;
  CHECK(open(d).code() == ErrorCode::not_found);
  d.device_index = 0;
  CHECK(open(d).ok());
  BackendConfig u;
  u.device_uuid = open_cpu()->info().uuid;
  CHECK(open(u).ok());
  u.device_uuid = "GPU-00000000-0000-0000-0000-000000000000";
  CHECK(open(u).code() == ErrorCode::not_found);
}

// Retained pages (allocator.hpp): freed large blocks stay mapped and serve
// later allocations, so a page-in does not pay a first-touch fault per page.
namespace {

constexpr std::uint64_t kMiB = 1ull << 20;

std::byte* bytes_at(DevicePtr p) { return reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(p)); }

BackendRange take(cpu::Allocator& a, std::uint64_t bytes, std::uint64_t alignment = 64) {
  auto r = a.allocate(bytes, alignment);
  REQUIRE_MESSAGE(r.ok(), r.error().to_string());
  return *r;
}

// Whether [p, p + bytes) is mapped in this process (mincore fails with
// ENOMEM on a range with any unmapped page).
bool mapped(DevicePtr p, std::uint64_t bytes) {
  std::vector<unsigned char> v((bytes + 4095) / 4096);
  return ::mincore(bytes_at(p), bytes, v.data()) == 0 || errno != ENOMEM;
}

// Whether the mapping holding `p` asks for transparent huge pages (the
// "hg" flag of its VmFlags in /proc/self/smaps).
bool asks_huge_pages(DevicePtr p) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &lo, &hi) == 2) {  // a mapping's first line
      inside = lo <= p && p < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line.find(" hg") != std::string::npos;
    }
  }
  return false;
}

std::uint64_t count(const std::byte* p, std::uint64_t bytes, std::byte value) {
  std::uint64_t n = 0;
  for (std::uint64_t i = 0; i < bytes; ++i) n += p[i] == value;
  return n;
}

}  // namespace

TEST_CASE("a freed large block serves the next one of its size, pages and all") {
  cpu::Allocator a(1ull << 40, 64 * kMiB);
  const BackendRange first = take(a, 4 * kMiB);
  CHECK(first.ptr % (2 * kMiB) == 0);
  std::memset(bytes_at(first.ptr), 0x5a, 4 * kMiB);
  CHECK(a.stats().fresh_bytes == 4 * kMiB);
  a.free(first);
  CHECK(a.stats().retained_bytes == 4 * kMiB);
  CHECK(mapped(first.ptr, 4 * kMiB));

  const BackendRange again = take(a, 4 * kMiB - 1);  // rounds up to the same whole pages
  CHECK(again.ptr == first.ptr);
  CHECK(count(bytes_at(again.ptr), 4 * kMiB, std::byte{0x5a}) == 4 * kMiB);  // the same pages, not fresh zeros
  CHECK(a.stats().retained_bytes == 0);
  CHECK(a.stats().reused_bytes == 4 * kMiB);
  CHECK(a.stats().fresh_bytes == 4 * kMiB);
  a.free(again);

  // Up to a huge page's alignment a block is mapped and retained; past it,
  // operator new's (nothing in ballast asks for that).
  const BackendRange huge_aligned = take(a, 4 * kMiB, 2 * kMiB);
  CHECK(huge_aligned.ptr == again.ptr);
  CHECK(a.stats().reused_bytes == 8 * kMiB);
  a.free(huge_aligned);
  CHECK(a.stats().retained_bytes == 4 * kMiB);
  const BackendRange aligned = take(a, 4 * kMiB, 4 * kMiB);
  CHECK(aligned.ptr % (4 * kMiB) == 0);
  CHECK(aligned.cookie == 4 * kMiB);
  CHECK(a.stats().retained_bytes == 4 * kMiB);
  a.free(aligned);
  CHECK(a.stats().retained_bytes == 4 * kMiB);
}

TEST_CASE("which blocks are mapped: from 2 MiB up to the largest allocation less 2 MiB") {
  cpu::Allocator a(64 * kMiB, 64 * kMiB);  // a 64 MiB "machine"
  const BackendRange small = take(a, 2 * kMiB - 1);
  CHECK(small.cookie != 0);  // operator new's: its alignment
  CHECK(a.stats().fresh_bytes == 0);
  const BackendRange edge = take(a, 62 * kMiB);  // rounded to whole huge pages, still within the largest
  CHECK(a.stats().fresh_bytes == 62 * kMiB);
  a.free(edge);
  a.free(small);
  const BackendRange past = take(a, 62 * kMiB + 1);  // would round past it: operator new's
  CHECK(past.cookie != 0);
  CHECK(a.stats().fresh_bytes == 62 * kMiB);
  CHECK(a.stats().retained_bytes == 62 * kMiB);
  a.free(past);
  const BackendRange whole = take(a, 64 * kMiB);  // exactly the largest is allowed
  a.free(whole);
  CHECK(a.allocate(64 * kMiB + 1, 64).code() == ErrorCode::out_of_memory);
  const BackendRange widest = take(a, 16, 1ull << 30);  // the largest alignment is allowed
  CHECK(widest.ptr % (1ull << 30) == 0);
  a.free(widest);
  CHECK(a.allocate(16, 1ull << 31).code() == ErrorCode::invalid_argument);
}

TEST_CASE("the smallest retained range that holds a block is the one taken, its rest kept") {
  cpu::Allocator a(1ull << 40, 64 * kMiB);
  const BackendRange big = take(a, 8 * kMiB), spacer = take(a, 2 * kMiB), small = take(a, 4 * kMiB);
  a.free(big);
  a.free(small);
  CHECK(a.stats().retained_bytes == 12 * kMiB);
  const BackendRange four = take(a, 4 * kMiB);
  CHECK(four.ptr == small.ptr);  // not the front of the 8 MiB range
  const BackendRange six = take(a, 6 * kMiB);
  CHECK(six.ptr == big.ptr);  // its front; 2 MiB of it stay
  CHECK(a.stats().retained_bytes == 2 * kMiB);
  const BackendRange two = take(a, 2 * kMiB);
  CHECK(two.ptr == big.ptr + 6 * kMiB);
  CHECK(a.stats().retained_bytes == 0);
  CHECK(a.stats().fresh_bytes == 14 * kMiB);
  for (const BackendRange& r : {four, six, two, spacer}) a.free(r);
}

TEST_CASE("blocks freed in pieces are moved together to serve a larger one") {
  cpu::Allocator a(1ull << 40, 64 * kMiB);
  const BackendRange x = take(a, 4 * kMiB), spacer = take(a, 2 * kMiB), y = take(a, 4 * kMiB);
  std::memset(bytes_at(x.ptr), 0x11, 4 * kMiB);
  std::memset(bytes_at(y.ptr), 0x22, 4 * kMiB);
  a.free(x);
  a.free(y);
  const BackendRange joined = take(a, 10 * kMiB);
  const std::byte* p = bytes_at(joined.ptr);
  // 8 MiB of the old pages, moved; the last 2 MiB fresh.
  CHECK(count(p, 8 * kMiB, std::byte{0x11}) == 4 * kMiB);
  CHECK(count(p, 8 * kMiB, std::byte{0x22}) == 4 * kMiB);
  CHECK(count(p + 8 * kMiB, 2 * kMiB, std::byte{0}) == 2 * kMiB);
  CHECK(a.stats().reused_bytes == 8 * kMiB);
  CHECK(a.stats().retained_bytes == 0);
  CHECK_FALSE(mapped(x.ptr, 4 * kMiB));  // moved away, not copied
  CHECK_FALSE(mapped(y.ptr, 4 * kMiB));
  std::memset(bytes_at(joined.ptr), 0x33, 10 * kMiB);  // writable throughout

  // Freed again, its pieces are retained one by one and serve a block
  // larger than any of them, across three.
  a.free(joined);
  CHECK(a.stats().retained_bytes == 10 * kMiB);
  const BackendRange most = take(a, 9 * kMiB);
  CHECK(a.stats().reused_bytes == 8 * kMiB + 10 * kMiB);
  CHECK(a.stats().retained_bytes == 0);
  CHECK(count(bytes_at(most.ptr), 10 * kMiB, std::byte{0x33}) == 10 * kMiB);
  a.free(most);
  a.free(spacer);
}

TEST_CASE("retained bytes never pass the bound; what passes it goes back to the kernel") {
  cpu::Allocator a(1ull << 40, 7 * kMiB);  // 6 MiB: whole huge pages
  const BackendRange r[3] = {take(a, 4 * kMiB), take(a, 4 * kMiB), take(a, 4 * kMiB)};
  for (const BackendRange& b : r) a.free(b);
  CHECK(a.stats().retained_bytes == 6 * kMiB);
  CHECK(mapped(r[0].ptr, 4 * kMiB));
  CHECK(mapped(r[1].ptr, 2 * kMiB));
  CHECK_FALSE(mapped(r[1].ptr + 2 * kMiB, 2 * kMiB));
  CHECK_FALSE(mapped(r[2].ptr, 4 * kMiB));

  cpu::Allocator none(1ull << 40, 0);
  const BackendRange b = take(none, 4 * kMiB);
  none.free(b);
  CHECK(none.stats().retained_bytes == 0);
  CHECK_FALSE(mapped(b.ptr, 4 * kMiB));
  CHECK(take(none, 4 * kMiB).ptr != 0);
  CHECK(none.stats().reused_bytes == 0);
}

TEST_CASE("the allocator's end unmaps what it retains and what was never freed") {
  DevicePtr kept = 0, live = 0;
  {
    cpu::Allocator a(1ull << 40, 64 * kMiB);
    kept = take(a, 4 * kMiB).ptr;
    live = take(a, 2 * kMiB).ptr;
    a.free(BackendRange{kept, 0});
    CHECK(mapped(kept, 4 * kMiB));
  }
  CHECK_FALSE(mapped(kept, 4 * kMiB));
  CHECK_FALSE(mapped(live, 2 * kMiB));
}

TEST_CASE("a failed move leaves the block whole on fresh pages and the retained range kept") {
  cpu::Allocator a(1ull << 40, 64 * kMiB);
  const BackendRange x = take(a, 4 * kMiB), spacer = take(a, 2 * kMiB), y = take(a, 2 * kMiB);
  std::memset(bytes_at(x.ptr), 0x44, 4 * kMiB);
  a.free(x);
  a.free(y);
  static int calls = 0;
  calls = 0;
  // The first move (the largest range, x) goes through; the second fails.
  a.set_remap_for_testing([](void* from, std::size_t old_size, std::size_t new_size, int flags, void* to) -> void* {
    if (++calls == 2) {
      ::munmap(to, new_size);  // as mremap does before it moves (MREMAP_FIXED)
      errno = ENOMEM;
      return MAP_FAILED;
    }
    return ::mremap(from, old_size, new_size, flags, to);
  });
  const BackendRange block = take(a, 8 * kMiB);
  CHECK(calls == 2);
  const std::byte* p = bytes_at(block.ptr);
  CHECK(count(p, 4 * kMiB, std::byte{0x44}) == 4 * kMiB);
  CHECK(count(p + 4 * kMiB, 4 * kMiB, std::byte{0}) == 4 * kMiB);  // mapped afresh after the failure
  std::memset(bytes_at(block.ptr), 0x55, 8 * kMiB);
  CHECK(asks_huge_pages(block.ptr + 4 * kMiB));  // the new mapping asks again
  CHECK(a.stats().reused_bytes == 4 * kMiB);
  CHECK(a.stats().retained_bytes == 2 * kMiB);  // y's range, back where it was
  CHECK(mapped(y.ptr, 2 * kMiB));
  a.free(block);
  a.free(spacer);
}

TEST_CASE("large blocks through the backend: aligned, writable, reused after a free") {
  auto b = open_cpu({{"retain_mib", "16"}});
  for (std::uint64_t align : {64ull, 4096ull, 1ull << 21, 1ull << 22}) {
    auto p = b->allocate(5 * kMiB + 3, align);
    REQUIRE_MESSAGE(p.ok(), p.error().to_string());
    CHECK(*p % align == 0);
    std::memset(bytes_at(*p), 0x66, 5 * kMiB + 3);
    auto q = b->allocate(3 * kMiB, align);
    REQUIRE(q.ok());
    CHECK((*q >= *p + 5 * kMiB + 3 || *q + 3 * kMiB <= *p));
    CHECK(b->free(*p).ok());
    CHECK(b->free(*q).ok());
  }
  for (std::uint64_t align : {64ull, 1ull << 21}) {  // up to a huge page's alignment, retained
    auto first = b->allocate(6 * kMiB, align);
    REQUIRE(first.ok());
    CHECK(asks_huge_pages(*first));
    std::memset(bytes_at(*first), 0x77, 6 * kMiB);
    CHECK(b->free(*first).ok());
    auto second = b->allocate(6 * kMiB, align);
    REQUIRE(second.ok());
    CHECK(*second == *first);  // the retained pages, not fresh zeros at the same address
    CHECK(count(bytes_at(*second), 6 * kMiB, std::byte{0x77}) == 6 * kMiB);
    CHECK(b->free(*second).ok());
  }
  CHECK(b->counters().live_allocations == 0);
}

TEST_CASE("a refused mapping gives the retained pages back and asks again; refused again, an error") {
  cpu::Allocator a(1ull << 40, 64 * kMiB);
  const BackendRange x = take(a, 4 * kMiB), y = take(a, 2 * kMiB);
  std::memset(bytes_at(x.ptr), 0x21, 4 * kMiB);
  std::memset(bytes_at(y.ptr), 0x21, 2 * kMiB);
  a.free(x);
  a.free(y);
  REQUIRE(a.stats().retained_bytes == 6 * kMiB);
  static int calls = 0, refusals = 0;
  calls = 0;
  refusals = 1;  // the first fresh mapping is refused
  a.set_map_for_testing([](void* address, std::size_t bytes, int prot, int flags, int fd, long offset) -> void* {
    ++calls;
    if (refusals > 0) {
      --refusals;
      errno = ENOMEM;
      return MAP_FAILED;
    }
    return ::mmap(address, bytes, prot, flags, fd, offset);
  });
  const BackendRange block = take(a, 8 * kMiB);  // no retained range holds it: a fresh range first
  CHECK(calls == 2);
  CHECK(a.stats().retained_bytes == 0);  // given back, not moved
  CHECK(a.stats().reused_bytes == 0);
  CHECK(count(bytes_at(block.ptr), 8 * kMiB, std::byte{0}) == 8 * kMiB);  // fresh pages only
  std::memset(bytes_at(block.ptr), 0x12, 8 * kMiB);
  a.free(block);
  CHECK(a.stats().retained_bytes == 8 * kMiB);

  // Refused twice: out_of_memory, nothing retained, nothing handed out.
  calls = 0;
  refusals = 2;
  auto refused = a.allocate(10 * kMiB, 64);
  CHECK(refused.code() == ErrorCode::out_of_memory);
  CHECK(calls == 2);
  CHECK(a.stats().retained_bytes == 0);
  // With nothing retained there is no second try.
  calls = 0;
  refusals = 1;
  CHECK(a.allocate(10 * kMiB, 64).code() == ErrorCode::out_of_memory);
  CHECK(calls == 1);
  CHECK(take(a, 10 * kMiB).ptr != 0);  // and the allocator still works
}

TEST_CASE("a refused small block gives the retained pages back and asks again; refused again, an error") {
  cpu::Allocator a(1ull << 40, 64 * kMiB);
  const BackendRange x = take(a, 4 * kMiB);
  std::memset(bytes_at(x.ptr), 0x21, 4 * kMiB);
  a.free(x);
  REQUIRE(a.stats().retained_bytes == 4 * kMiB);
  static int calls = 0, refusals = 0;
  calls = 0;
  refusals = 1;  // the first small block is refused
  a.set_new_for_testing([](std::size_t bytes, std::align_val_t alignment) -> void* {
    ++calls;
    if (refusals > 0) {
      --refusals;
      return nullptr;
    }
    return ::operator new(bytes, alignment, std::nothrow);
  });
  const BackendRange small = take(a, 4096);
  CHECK(calls == 2);
  CHECK(a.stats().retained_bytes == 0);  // given back before the second try
  CHECK(small.ptr % 64 == 0);
  std::memset(bytes_at(small.ptr), 0x12, 4096);
  a.free(small);

  // Refused twice: out_of_memory, nothing retained, nothing handed out.
  const BackendRange y = take(a, 2 * kMiB);
  a.free(y);
  REQUIRE(a.stats().retained_bytes == 2 * kMiB);
  calls = 0;
  refusals = 2;
  auto refused = a.allocate(100, 256);
  CHECK(refused.code() == ErrorCode::out_of_memory);
  CHECK(calls == 2);
  CHECK(a.stats().retained_bytes == 0);
  // With nothing retained there is no second try.
  calls = 0;
  refusals = 1;
  CHECK(a.allocate(100, 256).code() == ErrorCode::out_of_memory);
  CHECK(calls == 1);
  const BackendRange after = take(a, 100);  // and the allocator still works
  CHECK(after.ptr != 0);
  a.free(after);
}
