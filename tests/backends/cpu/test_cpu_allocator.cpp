// Allocation on the CPU backend: real aligned memory, errors instead of
// crashes, and counters that return to their baseline.
#include "cpu_test_support.hpp"

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
  c.options["colour"] = "blue";
  auto unknown = open(c);
  CHECK(unknown.code() == ErrorCode::invalid_argument);
  CHECK(unknown.error().to_string().find("known keys: threads, simd") != std::string::npos);

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
