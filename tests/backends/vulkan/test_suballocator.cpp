// The sub-allocator through the backend: many more allocations than the
// memory-object limit, each written and read back with its own pattern;
// reuse of freed ranges; the limit itself (blocks and host imports
// counted together, refusals that name it); the cached empty block; and
// kernels on operands that lie inside a block, next to other allocations.
#include "support.hpp"

#include "vulkan/suballocator.hpp"

#include <support/derivation_cases.hpp>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <set>

namespace ballast::vulkan::test {
namespace {

struct Live {
  DevicePtr ptr = 0;
  std::uint64_t bytes = 0;
  std::uint32_t id = 0;
};

// `bytes` bytes that no other allocation of the test has: the id in the
// first four, then a sequence seeded by it.
std::vector<std::uint8_t> pattern(std::uint32_t id, std::uint64_t bytes) {
  std::vector<std::uint8_t> out(bytes);
  std::uint32_t x = id * 2654435761u + 0x9e3779b9u;
  for (std::uint64_t i = 0; i < bytes; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    out[i] = static_cast<std::uint8_t>(i < 4 ? id >> (8 * i) : x);
  }
  return out;
}

// Mostly 4..4096 bytes, some not whole words; one in 64 from 64 KiB to
// 1 MiB, so that the allocations need several blocks.
std::uint64_t draw_size(std::mt19937& rng) {
  if (rng() % 64 == 0) return (64u << 10) + rng() % (960u << 10);
  return 4 + rng() % 4093;
}

constexpr std::uint64_t kAlignments[] = {1, 4, 8, 16, 64, 256, 4096};

void allocate_and_write(Checked& b, std::mt19937& rng, std::uint32_t& next_id, std::size_t count,
                        std::vector<Live>& live, std::uint64_t limit) {
  for (std::size_t i = 0; i < count; ++i) {
    Live l;
    l.bytes = draw_size(rng);
    l.id = next_id++;
    const std::uint64_t alignment = kAlignments[rng() % std::size(kAlignments)];
    auto p = b.allocate(l.bytes, alignment);
    REQUIRE_MESSAGE(p.ok(), p.status().to_string());
    l.ptr = *p;
    REQUIRE(l.ptr % alignment == 0);
    const auto data = pattern(l.id, l.bytes);
    REQUIRE(b.copy_to_device(l.ptr, 0, std::as_bytes(std::span(data))).ok());
    live.push_back(l);
    REQUIRE(b.memory_objects().live <= limit);
  }
}

// Every live allocation holds its own pattern, and no two overlap.
void verify(Checked& b, std::vector<Live> live) {
  std::sort(live.begin(), live.end(), [](const Live& x, const Live& y) { return x.ptr < y.ptr; });
  std::size_t overlaps = 0, wrong = 0;
  for (std::size_t i = 0; i + 1 < live.size(); ++i)
    if (live[i].ptr + live[i].bytes > live[i + 1].ptr) ++overlaps;
  for (const Live& l : live) {
    std::vector<std::uint8_t> back(l.bytes);
    REQUIRE(b.copy_to_host(std::as_writable_bytes(std::span(back)), l.ptr, 0).ok());
    if (back != pattern(l.id, l.bytes)) ++wrong;
  }
  CHECK(overlaps == 0);
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("sub-allocation: 15,000 allocations under a limit of 16 memory objects, reused and verified") {
  auto b = open("?max_memory_allocations=16");
  REQUIRE(b->memory_objects().limit == 16);
  CHECK(b->memory_objects().live == 1);  // the staging buffer
  std::mt19937 rng(2026);
  std::uint32_t next_id = 1;
  std::vector<Live> live;
  allocate_and_write(*b, rng, next_id, 10000, live, 16);
  CHECK(b->counters().live_allocations == 10000);
  CHECK(b->memory_objects().blocks >= 2);  // the large ones spill into more blocks
  verify(*b, live);

  // Free half, scattered.
  std::shuffle(live.begin(), live.end(), rng);
  std::vector<Live> freed(live.begin(), live.begin() + 5000);
  live.erase(live.begin(), live.begin() + 5000);
  for (const Live& l : freed) REQUIRE(b->free(l.ptr).ok());
  CHECK(b->counters().live_allocations == 5000);

  // 5,000 more: most land in the freed ranges.
  std::sort(freed.begin(), freed.end(), [](const Live& x, const Live& y) { return x.ptr < y.ptr; });
  const std::size_t before = live.size();
  allocate_and_write(*b, rng, next_id, 5000, live, 16);
  std::size_t reused = 0;
  for (std::size_t i = before; i < live.size(); ++i) {
    auto it = std::upper_bound(freed.begin(), freed.end(), live[i].ptr,
                               [](DevicePtr p, const Live& l) { return p < l.ptr; });
    if (it != freed.begin() && live[i].ptr < std::prev(it)->ptr + std::max<std::uint64_t>(std::prev(it)->bytes, 4))
      ++reused;
  }
  CAPTURE(reused);
  CHECK(reused > 2500);
  verify(*b, live);

  std::shuffle(live.begin(), live.end(), rng);
  for (const Live& l : live) REQUIRE(b->free(l.ptr).ok());
  const auto end = b->memory_objects();
  CHECK(b->counters().live_allocations == 0);
  CHECK(b->counters().live_bytes == 0);
  CHECK(end.peak <= 16);
  CHECK(end.blocks <= 1);  // empty blocks are released; at most one is kept
  CHECK(end.live == 1 + end.blocks);
}

TEST_CASE("sub-allocation: past the limit a new block or import is out_of_memory naming the limit and the count") {
  auto b = open("?max_memory_allocations=16");
  auto first = b->allocate(100, 256);
  REQUIRE(first.ok());
  CHECK(b->memory_objects().live == 2);  // staging + one block
  // Fill the other 14 memory objects: host imports where the device takes
  // them (they count too), otherwise blocks of their own.
  const bool imports = b->capabilities().host_registration;
  constexpr std::size_t kPage = 4096;
  void* host = std::aligned_alloc(kPage, 16 * kPage);
  REQUIRE(host != nullptr);
  std::vector<DevicePtr> held;
  Error refused;
  for (std::size_t i = 0;; ++i) {
    REQUIRE(i < 16);
    auto p = imports ? b->register_host(static_cast<std::byte*>(host) + i * kPage, kPage, HostAccess::read_write)
                     : b->allocate(kBlockBytes, 256);
    if (!p) {
      refused = p.error();
      break;
    }
    held.push_back(*p);
  }
  CAPTURE(refused.to_string());
  CHECK(held.size() == 14);
  CHECK(refused.code == ErrorCode::out_of_memory);
  CHECK(refused.message.find("limit of 16") != std::string::npos);
  CHECK(refused.message.find("max_memory_allocations=16") != std::string::npos);
  CHECK(refused.message.find("it holds 16") != std::string::npos);
  CHECK(b->memory_objects().live == 16);

  // The block in use still takes small allocations; one that needs a 17th
  // object (a block of its own) is refused, and nothing is counted.
  auto small = b->allocate(1000, 64);
  CHECK(small.ok());
  const auto counted = b->counters();
  auto big = b->allocate(kBlockBytes, 256);
  REQUIRE_FALSE(big.ok());
  CAPTURE(big.error().to_string());
  CHECK(big.code() == ErrorCode::out_of_memory);
  CHECK(big.error().message.find("memory block of") != std::string::npos);
  CHECK(big.error().message.find("limit of 16") != std::string::npos);
  CHECK(b->counters().live_allocations == counted.live_allocations);
  CHECK(b->counters().live_bytes == counted.live_bytes);

  // Releasing one object makes room for exactly one more.
  REQUIRE((imports ? b->unregister_host(held.back()) : b->free(held.back())).ok());
  held.pop_back();
  auto fits = b->allocate(kBlockBytes, 256);
  REQUIRE_MESSAGE(fits.ok(), fits.status().to_string());
  CHECK(b->allocate(kBlockBytes, 256).code() == ErrorCode::out_of_memory);
  CHECK(b->memory_objects().peak == 16);

  CHECK(b->free(*fits).ok());
  CHECK(b->free(*small).ok());
  CHECK(b->free(*first).ok());
  for (DevicePtr p : held) CHECK((imports ? b->unregister_host(p) : b->free(p)).ok());
  std::free(host);
  CHECK(b->memory_objects().live == 1 + b->memory_objects().blocks);
}

TEST_CASE("sub-allocation: one empty block is kept, and gives way when another object needs its place") {
  auto b = open("?max_memory_allocations=2");  // the staging buffer and one more
  auto p = b->allocate(64, 256);
  REQUIRE(p.ok());
  CHECK(b->memory_objects().blocks == 1);
  REQUIRE(b->free(*p).ok());
  CHECK(b->memory_objects().blocks == 1);  // kept
  auto q = b->allocate(64, 256);
  REQUIRE(q.ok());
  CHECK(*q == *p);  // the same bytes again
  REQUIRE(b->free(*q).ok());

  // Larger than a block: a block of its own, which replaces the kept one
  // rather than fail, and is released when freed.
  auto big = b->allocate(kBlockBytes + 4, 256);
  REQUIRE_MESSAGE(big.ok(), big.status().to_string());
  CHECK(b->memory_objects().blocks == 1);
  REQUIRE(b->free(*big).ok());
  CHECK(b->memory_objects().blocks == 0);
  CHECK(b->memory_objects().peak == 2);

  if (b->capabilities().host_registration) {
    auto r = b->allocate(64, 256);
    REQUIRE(r.ok());
    REQUIRE(b->free(*r).ok());
    CHECK(b->memory_objects().blocks == 1);
    void* host = std::aligned_alloc(4096, 4096);
    REQUIRE(host != nullptr);
    auto reg = b->register_host(host, 4096, HostAccess::read_write);
    REQUIRE_MESSAGE(reg.ok(), reg.status().to_string());
    CHECK(b->memory_objects().blocks == 0);
    CHECK(b->allocate(64, 256).code() == ErrorCode::out_of_memory);
    REQUIRE(b->unregister_host(*reg).ok());
    std::free(host);
  }
  CHECK(b->memory_objects().peak == 2);
}

TEST_CASE("sub-allocation: the max_memory_allocations option") {
  auto known = VulkanBackend::open(config("?colour=red"));
  REQUIRE_FALSE(known.ok());
  CHECK(known.error().message.find("max_memory_allocations") != std::string::npos);
  for (const std::string bad : {"?max_memory_allocations=0", "?max_memory_allocations=-1",
                                "?max_memory_allocations=1.5", "?max_memory_allocations=many"}) {
    CAPTURE(bad);
    auto opened = VulkanBackend::open(config(bad));
    REQUIRE_FALSE(opened.ok());
    CHECK(opened.code() == ErrorCode::invalid_argument);
    CHECK(opened.error().message.find("max_memory_allocations must be a positive integer") != std::string::npos);
  }
  // Above the driver's limit, the driver's limit holds.
  const auto plain = open()->memory_objects().limit;
  CHECK(plain >= 4096);  // the least the Vulkan specification allows
  CHECK(open("?max_memory_allocations=" + std::to_string(std::uint64_t{1} << 40))->memory_objects().limit == plain);
}

// Operands are sub-ranges of one block at non-zero offsets, each between
// two guard allocations: the kernels reach them through the block's
// address plus the offset, must match the scalar reference, and must not
// touch the neighbours.
TEST_CASE("sub-allocation: derivations on operands inside a block match the reference and spare their neighbours") {
  auto b = open();
  const reference::Tolerance tolerance{b->capabilities().flushes_f16_subnormals,
                                       b->capabilities().int8_codes_within_one};
  const auto cases = test_cases::kernel_cases();
  std::set<Derivation> kinds;
  for (std::size_t i = 0; i < cases.size(); i += 3) {
    const test_cases::DerivationCase& c = cases[i];
    CAPTURE(c.label);
    auto sizes = derivation_sizes(c.shape);
    REQUIRE(sizes.ok());
    std::vector<DevicePtr> owned;
    std::vector<std::pair<DevicePtr, std::uint64_t>> guards;
    auto guard = [&](std::uint64_t bytes) {
      auto p = b->allocate(bytes, 4);
      REQUIRE(p.ok());
      const std::vector<std::uint8_t> fill(bytes, 0xab);
      REQUIRE(b->copy_to_device(*p, 0, std::as_bytes(std::span(fill))).ok());
      owned.push_back(*p);
      guards.emplace_back(*p, bytes);
    };
    // An operand of `bytes`, 16-aligned (every element size), then a guard.
    auto operand = [&](std::span<const std::byte> data, std::uint64_t bytes) -> DevicePtr {
      if (bytes == 0) return 0;
      auto p = b->allocate(bytes, 16);
      REQUIRE(p.ok());
      owned.push_back(*p);
      if (data.empty()) {
        const std::vector<std::uint8_t> fill(bytes, 0xcd);
        REQUIRE(b->copy_to_device(*p, 0, std::as_bytes(std::span(fill))).ok());
      } else {
        REQUIRE(b->copy_to_device(*p, 0, data).ok());
      }
      guard(4 + i % 3 * 4);
      return *p;
    };
    guard(36);
    DerivationLaunch l = c.shape;
    l.src = operand(c.src, sizes->src_bytes);
    l.scales = operand(c.scales, sizes->scales_bytes);
    l.zero_point = operand(c.zero_points, sizes->zero_point_bytes);
    l.dst = operand({}, sizes->dst_bytes);
    l.dst2 = operand({}, sizes->dst2_bytes);
    REQUIRE(b->memory_objects().blocks == 1);  // all in one block, after the first guard
    for (DevicePtr p : {l.src, l.scales, l.zero_point, l.dst, l.dst2})
      if (p != 0) CHECK(p > guards.front().first);
    const Status launched = b->launch(l);
    REQUIRE_MESSAGE(launched.ok(), launched.to_string());
    REQUIRE(b->synchronize().ok());
    const auto dst = download<std::byte>(*b, l.dst, sizes->dst_bytes);
    const auto dst2 = sizes->dst2_bytes ? download<std::byte>(*b, l.dst2, sizes->dst2_bytes) : std::vector<std::byte>{};
    auto expected = reference::derive(c.shape, c.inputs());
    REQUIRE(expected.ok());
    const auto cmp = reference::compare(c.shape, *expected, dst, dst2, tolerance);
    CHECK_MESSAGE(cmp.ok, cmp.message);
    for (const auto& [p, bytes] : guards)
      CHECK(download<std::uint8_t>(*b, p, bytes) == std::vector<std::uint8_t>(bytes, 0xab));
    for (DevicePtr p : owned) CHECK(b->free(p).ok());
    kinds.insert(c.shape.kind);
  }
  CHECK(kinds.size() == static_cast<std::size_t>(kDerivationCount));  // every derivation
  CHECK(b->counters().live_allocations == 0);
}

}  // namespace ballast::vulkan::test
