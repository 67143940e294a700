// GpuBackend's validated public methods, seen from a test double: what the
// core refuses never reaches the backend, and a failed device call leaves
// the core's record as it was.
#include "unit/memo/recording_backend.hpp"

#include <ballast/gpu_backend.hpp>
#include <ballast/log.hpp>

#include <string>
#include <vector>

#include <doctest/doctest.h>

using namespace ballast;
using ballast::test::RecordingBackend;

TEST_CASE("a free the device refuses leaves the allocation live, and a retry reaches the device again") {
  RecordingBackend gpu;
  auto p = gpu.allocate(128);
  REQUIRE(p.ok());
  CHECK(gpu.counters().live_allocations == 1);
  CHECK(gpu.counters().live_bytes == 128);
  gpu.refuse(*p);
  const Status first = gpu.free(*p);
  CHECK(first.code() == ErrorCode::device_error);
  CHECK(gpu.counters().live_allocations == 1);
  CHECK(gpu.counters().live_bytes == 128);
  // Still recorded, so the retry is not "unknown pointer": it goes to the device.
  CHECK(gpu.free(*p).code() == ErrorCode::device_error);
  CHECK(gpu.times_freed(*p) == 2);
}

TEST_CASE("teardown frees a range whose first free is refused, and logs the refusal") {
  RecordingBackend gpu;
  auto a = gpu.allocate(64), b = gpu.allocate(64), c = gpu.allocate(64);
  REQUIRE((a.ok() && b.ok() && c.ok()));
  gpu.refuse_once(*b);  // the pending error is reported on the first call after it
  gpu.refuse(*c);       // a sticky error: refused every time
  std::vector<std::string> logged;
  set_log_sink([&](const LogMessage& m) { logged.emplace_back(m.text); });
  gpu.release_everything();
  set_log_sink({});
  CHECK_FALSE(gpu.is_live(*a));
  CHECK_FALSE(gpu.is_live(*b));  // freed by the second try
  CHECK(gpu.times_freed(*b) == 2);
  CHECK(gpu.is_live(*c));  // lost with the device, after two tries
  CHECK(gpu.times_freed(*c) == 2);
  CHECK(gpu.counters().live_allocations == 0);
  REQUIRE(logged.size() == 3);  // b once, c twice
  CHECK(logged[0].find("at teardown: ") == 0);
  CHECK(logged[0].find("refused") != std::string::npos);
}

TEST_CASE("what the core refuses never reaches the device") {
  RecordingBackend gpu;
  auto p = gpu.allocate(256);
  REQUIRE(p.ok());
  CHECK(gpu.free(*p + 16).code() == ErrorCode::invalid_argument);  // interior
  CHECK(gpu.free(0x7777000).code() == ErrorCode::invalid_argument);  // unknown
  CHECK(gpu.times_freed(*p + 16) == 0);
  CHECK(gpu.freed().empty());
  CHECK(gpu.free(*p).ok());
  CHECK(gpu.free(*p).code() == ErrorCode::invalid_argument);  // double
  CHECK(gpu.times_freed(*p) == 1);
  CHECK(gpu.bad_frees() == 0);
  CHECK(gpu.allocate(64, 24).code() == ErrorCode::invalid_argument);
  CHECK(gpu.counters().live_allocations == 0);
}

TEST_CASE("every validation error names the backend and the operation") {
  RecordingBackend gpu;
  auto p = gpu.allocate(64);
  REQUIRE(p.ok());
  std::byte host[128] = {};
  const Status s = gpu.copy_to_device(*p, 0, std::span<const std::byte>(host, 128));
  REQUIRE(s.code() == ErrorCode::out_of_bounds);
  CHECK(s.error().context.find("recording: copy 128 bytes host to device") != std::string::npos);
  CHECK(s.error().message.find("dst [") == 0);
  CHECK(s.error().message.find("runs past the end of its allocation") != std::string::npos);
  CHECK(gpu.free(*p).ok());
}

TEST_CASE("a read-only registration on a device that cannot honour it is refused by name; read-write goes through") {
  RecordingBackend gpu;
  gpu.allow_registration(/*read_only=*/false);
  std::byte host[256] = {};
  auto ro = gpu.register_host(host, sizeof host, HostAccess::read_only);
  REQUIRE_FALSE(ro.ok());
  CHECK(ro.code() == ErrorCode::unsupported);
  CHECK(ro.error().message.find("cannot register host memory read-only") != std::string::npos);
  CHECK(ro.error().context.find(" read-only") != std::string::npos);
  CHECK(gpu.registrations() == 0);  // refused before the device

  auto rw = gpu.register_host(host, sizeof host, HostAccess::read_write);
  REQUIRE_MESSAGE(rw.ok(), rw.error().to_string());
  CHECK(gpu.registrations() == 1);
  CHECK(gpu.unregister_host(*rw).ok());

  gpu.allow_registration(/*read_only=*/true);
  auto honoured = gpu.register_host(host, sizeof host, HostAccess::read_only);
  REQUIRE_MESSAGE(honoured.ok(), honoured.error().to_string());
  CHECK(gpu.registrations() == 2);
  CHECK(gpu.unregister_host(*honoured).ok());
}
