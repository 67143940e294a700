// The placement rules of one memory block (backends/vulkan/free_ranges.hpp),
// alone: alignment against the block's address, best fit, merging of freed
// neighbours, and a random workload checked against a byte map.
#include "support.hpp"

#include "vulkan/free_ranges.hpp"

#include <algorithm>
#include <random>

namespace ballast::vulkan::test {

TEST_CASE("free ranges: aligned placement keeps the skipped bytes free") {
  FreeRanges r(1024);
  CHECK(r.all_free());
  CHECK(r.take(16, 4, 0) == 0u);
  CHECK(r.take(16, 64, 0) == 64u);  // 16..64 stay free
  CHECK(r.free_bytes() == 1024 - 32);
  CHECK(r.free_range_count() == 2);
  // Best fit: the 48-byte gap, not the tail.
  CHECK(r.take(32, 4, 0) == 16u);
  CHECK(r.take(16, 4, 0) == 48u);
  CHECK(r.free_range_count() == 1);
  // Alignment is of the address: a block at 0x1004 puts a 64-aligned
  // allocation 60 bytes before a 64-byte boundary of its offsets.
  FreeRanges shifted(1024);
  const auto at = shifted.take(8, 64, 0x1004);
  REQUIRE(at.has_value());
  CHECK((0x1004 + *at) % 64 == 0);
  CHECK(*at == 60u);
  CHECK(shifted.free_bytes() == 1024 - 8);
}

TEST_CASE("free ranges: a request that fits nowhere is refused, and fits once a neighbour is freed") {
  FreeRanges r(64);
  CHECK(r.take(64, 4, 0) == 0u);
  CHECK_FALSE(r.take(4, 4, 0).has_value());
  r.give_back(0, 64);
  CHECK(r.all_free());
  const auto a = r.take(32, 4, 0), b = r.take(32, 4, 0);
  REQUIRE(a.has_value());
  REQUIRE(b.has_value());
  CHECK_FALSE(r.take(40, 4, 0).has_value());
  r.give_back(*a, 32);
  CHECK_FALSE(r.take(40, 4, 0).has_value());
  CHECK_FALSE(r.take(32, 64, 4).has_value());  // no 64-aligned address in 4..68 holds 32 bytes from offset 0
  r.give_back(*b, 32);
  CHECK(r.all_free());
  CHECK(r.take(64, 4, 0) == 0u);
}

TEST_CASE("free ranges: merging with the previous, the next, and both neighbours") {
  FreeRanges r(40);
  std::uint64_t at[10];
  for (auto& a : at) {
    auto t = r.take(4, 4, 0);
    REQUIRE(t.has_value());
    a = *t;
  }
  CHECK(r.free_range_count() == 0);
  r.give_back(at[2], 4);
  r.give_back(at[4], 4);
  CHECK(r.free_range_count() == 2);
  r.give_back(at[3], 4);  // both neighbours
  CHECK(r.free_range_count() == 1);
  r.give_back(at[5], 4);  // the previous
  r.give_back(at[1], 4);  // the next
  CHECK(r.free_range_count() == 1);
  CHECK(r.largest_free() == 20);
  r.give_back(at[9], 4);
  r.give_back(at[0], 4);
  CHECK(r.free_range_count() == 2);
  for (int i : {6, 8, 7}) r.give_back(at[i], 4);
  CHECK(r.all_free());
  CHECK(r.largest_free() == 40);
}

TEST_CASE("free ranges: a random workload never overlaps, stays aligned and ends whole") {
  constexpr std::uint64_t kSize = 1 << 20;
  constexpr std::uint64_t kBase = 0x7f0000001234 & ~std::uint64_t{3};
  FreeRanges r(kSize);
  std::vector<std::uint8_t> used(kSize / 4, 0);  // one flag per word
  struct Live {
    std::uint64_t offset, size;
  };
  std::vector<Live> live;
  std::mt19937 rng(17);
  std::uint64_t used_bytes = 0;
  int refusals = 0;
  for (int step = 0; step < 20000; ++step) {
    const bool take = live.empty() || rng() % 100 < 55;
    if (take) {
      const std::uint64_t size = 4 * (1 + rng() % (rng() % 8 == 0 ? 4096 : 64));
      const std::uint64_t alignment = std::uint64_t{4} << (rng() % 11);
      const auto at = r.take(size, alignment, kBase);
      if (!at) {
        // Refused only if no free run of words holds it aligned (checked
        // for the first refusals: each check walks the whole map).
        if (++refusals <= 200) {
          for (std::uint64_t w = 0; w < used.size();) {
            if (used[w] != 0) {
              ++w;
              continue;
            }
            std::uint64_t end = w;
            while (end < used.size() && used[end] == 0) ++end;
            const std::uint64_t address = kBase + 4 * w;
            const std::uint64_t start = (address + alignment - 1) / alignment * alignment - kBase;
            CHECK_FALSE(start + size <= 4 * end);
            w = end;
          }
        }
        continue;
      }
      REQUIRE(*at + size <= kSize);
      CHECK((kBase + *at) % alignment == 0);
      for (std::uint64_t w = *at / 4; w < (*at + size) / 4; ++w) {
        REQUIRE(used[w] == 0);
        used[w] = 1;
      }
      live.push_back({*at, size});
      used_bytes += size;
    } else {
      const std::size_t i = rng() % live.size();
      const Live l = live[i];
      live[i] = live.back();
      live.pop_back();
      r.give_back(l.offset, l.size);
      for (std::uint64_t w = l.offset / 4; w < (l.offset + l.size) / 4; ++w) used[w] = 0;
      used_bytes -= l.size;
    }
    REQUIRE(r.free_bytes() == kSize - used_bytes);
  }
  CHECK(refusals > 0);  // the workload filled the block at times
  std::shuffle(live.begin(), live.end(), rng);
  for (const Live& l : live) r.give_back(l.offset, l.size);
  CHECK(r.all_free());
  CHECK(r.free_range_count() == 1);
}

}  // namespace ballast::vulkan::test
