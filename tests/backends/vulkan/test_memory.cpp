#include "support.hpp"

#include <numeric>
#include <set>
#include <thread>

namespace ballast::vulkan::test {

TEST_CASE("allocations: zero bytes, odd sizes, alignment, counters") {
  auto b = open();
  const auto base = b->counters();
  std::set<DevicePtr> seen;
  std::vector<DevicePtr> live;
  for (std::uint64_t bytes : {0ull, 0ull, 1ull, 3ull, 4097ull, 1000000ull}) {
    auto p = b->allocate(bytes, 256);
    REQUIRE(p.ok());
    CHECK(*p % 256 == 0);
    CHECK(seen.insert(*p).second);
    live.push_back(*p);
  }
  auto aligned = b->allocate(100, 65536);
  REQUIRE(aligned.ok());
  CHECK(*aligned % 65536 == 0);
  live.push_back(*aligned);
  CHECK(b->counters().live_allocations == base.live_allocations + 7);
  CHECK(b->counters().live_bytes == base.live_bytes + 1 + 3 + 4097 + 1000000 + 100);

  CHECK(b->allocate(16, 3).code() == ErrorCode::invalid_argument);
  CHECK(b->allocate(16, 0).code() == ErrorCode::invalid_argument);

  CHECK(b->free(live[3] + 4).code() == ErrorCode::invalid_argument);  // interior pointer
  for (DevicePtr p : live) CHECK(b->free(p).ok());
  auto twice = b->free(live[0]);
  CHECK(twice.code() == ErrorCode::invalid_argument);
  CHECK(b->free(12345).code() == ErrorCode::invalid_argument);
  CHECK(b->counters().live_allocations == base.live_allocations);
  CHECK(b->counters().live_bytes == base.live_bytes);
}

TEST_CASE("allocations past the device's limit are refused with the reason") {
  auto b = open();
  auto huge = b->allocate(b->capabilities().max_single_allocation + 1, 256);
  REQUIRE_FALSE(huge.ok());
  CHECK(huge.code() == ErrorCode::out_of_memory);
  CHECK(huge.error().message.find("maxMemoryAllocationSize") != std::string::npos);
  auto absurd = b->allocate(1ull << 62, 256);
  CHECK(absurd.code() == ErrorCode::out_of_memory);
  CHECK(b->counters().live_allocations == 0);
}

TEST_CASE("copies round-trip at offsets, within bounds only") {
  auto b = open();
  std::vector<std::uint8_t> data(100003);
  std::iota(data.begin(), data.end(), std::uint8_t{7});
  auto p = b->allocate(data.size() + 13, 256);
  REQUIRE(p.ok());
  REQUIRE(b->copy_to_device(*p, 13, std::as_bytes(std::span(data))).ok());
  CHECK(download<std::uint8_t>(*b, *p, data.size(), 13) == data);
  CHECK(download<std::uint8_t>(*b, *p + 13, data.size()) == data);  // interior pointer, no offset

  auto past = b->copy_to_device(*p, 14, std::as_bytes(std::span(data)));
  CHECK(past.code() == ErrorCode::out_of_bounds);
  CHECK(past.error().message.find("dst") != std::string::npos);
  std::vector<std::uint8_t> sink(10);
  CHECK(b->copy_to_host(std::as_writable_bytes(std::span(sink)), *p, data.size() + 4).code() == ErrorCode::out_of_bounds);
  CHECK(b->copy_to_host(std::as_writable_bytes(std::span(sink)), 4096, 0).code() == ErrorCode::invalid_argument);

  // Device to device; overlapping ranges of one buffer are refused (the core's rule for every backend).
  auto q = b->allocate(data.size(), 256);
  REQUIRE(q.ok());
  REQUIRE(b->copy_device(*q, 0, *p, 13, data.size()).ok());
  CHECK(download<std::uint8_t>(*b, *q, data.size()) == data);
  CHECK(b->copy_device(*p, 0, *p, 13, data.size()).code() == ErrorCode::invalid_argument);  // overlapping
  CHECK(b->copy_device(*p, 13, *p, 0, data.size()).code() == ErrorCode::invalid_argument);
  CHECK(b->copy_device(*q, 1, *p, 0, data.size()).code() == ErrorCode::out_of_bounds);
  CHECK(b->free(*p).ok());
  CHECK(b->free(*q).ok());
}

TEST_CASE("copies larger than the staging buffer are chunked") {
  auto b = open();
  std::vector<std::uint32_t> data((40u << 20) / 4 + 5);
  std::iota(data.begin(), data.end(), 1u);
  const DevicePtr p = upload(*b, data);
  CHECK(download<std::uint32_t>(*b, p, data.size()) == data);
  CHECK(b->free(p).ok());
}

TEST_CASE("copies from several threads at once") {
  auto b = open();
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::uint32_t> data(10000 + t);
      std::iota(data.begin(), data.end(), static_cast<std::uint32_t>(t * 1000000));
      for (int round = 0; round < 5; ++round) {
        auto p = b->allocate(data.size() * 4, 256);
        if (!p) return;
        std::vector<std::uint32_t> back(data.size());
        const bool good = b->copy_to_device(*p, 0, std::as_bytes(std::span(data))).ok() &&
                          b->copy_to_host(std::as_writable_bytes(std::span(back)), *p, 0).ok() && back == data &&
                          b->free(*p).ok();
        if (!good) return;
      }
      ok[t] = 1;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(std::accumulate(ok.begin(), ok.end(), 0) == 4);
  CHECK(b->counters().live_allocations == 0);
}

}  // namespace ballast::vulkan::test
