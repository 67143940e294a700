// RuntimeBackend and RuntimePlugin (the host side of the CUDA and HIP
// plugins) over an emulated driver: everything except the vendor runtime
// and the GPU itself.
#include "support/derivation_cases.hpp"
#include "cuda_hip/host/backend.hpp"
#include "cuda_hip/host/plugin.hpp"
#include "host_driver.hpp"
#include "reference/reference.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <thread>

using namespace ballast;
using namespace ballast::gpu;
using ballast::gpu::testing::HostDriver;
using ballast::gpu::testing::Op;

namespace {

std::unique_ptr<GpuBackend> open_host(int devices = 1, bool read_only_registration = true) {
  HostDriver::reset(devices, read_only_registration);
  auto b = RuntimeBackend::open(HostDriver::api(), 0);
  REQUIRE_MESSAGE(b.ok(), b.error().to_string());
  // Behind the core's checks, through the same tables the plugin's open gives.
  auto checked = adopt_device(std::move(*b));
  REQUIRE_MESSAGE(checked.ok(), checked.error().to_string());
  return std::move(*checked);
}

std::span<const std::byte> bytes_of(const std::vector<float>& v) { return std::as_bytes(std::span(v)); }

DevicePtr upload(GpuBackend& b, std::span<const std::byte> data) {
  auto p = b.allocate(data.size());
  REQUIRE(p.ok());
  REQUIRE(b.copy_to_device(*p, 0, data).ok());
  return *p;
}

std::vector<std::byte> download(GpuBackend& b, DevicePtr p, std::uint64_t bytes) {
  std::vector<std::byte> out(bytes);
  REQUIRE(b.copy_to_host(out, p, 0).ok());
  return out;
}

}  // namespace

TEST_CASE("plugin: a failing device count is `unavailable` with the reason and the driver's name") {
  HostDriver::reset();
  RuntimePlugin plugin(HostDriver::api());
  HostDriver::fail_next(Op::device_count, testing::kNoDevice);
  auto devices = plugin.devices();
  REQUIRE_FALSE(devices.ok());
  CHECK(devices.error().code == ErrorCode::unavailable);
  CHECK(devices.error().native == "hostErrorNoDevice");
  CHECK(devices.error().message == "no host device (hostErrorNoDevice)");

  HostDriver::reset(0);
  auto none = plugin.devices();
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().code == ErrorCode::unavailable);
  BackendConfig config;
  config.name = "host";
  CHECK(plugin.open(config).code() == ErrorCode::unavailable);
}

TEST_CASE("plugin: devices are listed and opened by index or UUID; unknown options and devices are refused") {
  HostDriver::reset(2);
  RuntimePlugin plugin(HostDriver::api());
  auto devices = plugin.devices();
  REQUIRE(devices.ok());
  REQUIRE(devices->size() == 2);
  CHECK((*devices)[1].uuid == "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f");
  CHECK((*devices)[1].name == "host device 1");

  BackendConfig config;
  config.name = "host";
  config.device_uuid = (*devices)[1].uuid;
  auto by_uuid = plugin.open(config);
  REQUIRE(by_uuid.ok());
  CHECK((*by_uuid)->do_info().index == 1);

  config.device_uuid = "GPU-00000000-0000-0000-0000-000000000000";
  CHECK(plugin.open(config).code() == ErrorCode::not_found);
  config.device_uuid.reset();
  config.device_index = 2;
  CHECK(plugin.open(config).code() == ErrorCode::not_found);
  config.device_index = 0;
  config.options["fast"] = "yes";
  auto with_option = plugin.open(config);
  REQUIRE_FALSE(with_option.ok());
  CHECK(with_option.error().code == ErrorCode::invalid_argument);
  CHECK(with_option.error().message.find("fast") != std::string::npos);
}

TEST_CASE("allocation: zero bytes, alignment, counters, unknown and double frees") {
  auto b = open_host();
  auto zero = b->allocate(0);
  auto zero2 = b->allocate(0);
  REQUIRE(zero.ok());
  REQUIRE(zero2.ok());
  CHECK(*zero != *zero2);
  auto aligned = b->allocate(100, 4096);
  REQUIRE(aligned.ok());
  CHECK(*aligned % 4096 == 0);
  CHECK(b->allocate(8, 3).code() == ErrorCode::invalid_argument);
  CHECK(b->allocate(8, 0).code() == ErrorCode::invalid_argument);
  AllocationCounters c = b->counters();
  CHECK(c.live_allocations == 3);
  CHECK(c.live_bytes == 100);

  CHECK(b->free(*aligned).ok());
  const Status twice = b->free(*aligned);
  CHECK(twice.code() == ErrorCode::invalid_argument);
  CHECK(twice.error().message.find("not a live allocation") != std::string::npos);
  CHECK(b->free(12345).code() == ErrorCode::invalid_argument);
  CHECK(b->free(*zero).ok());
  CHECK(b->free(*zero2).ok());
  CHECK(b->counters().live_allocations == 0);
  CHECK(HostDriver::live_allocations() == 0);
}

TEST_CASE("allocation: the driver's out-of-memory is out_of_memory with its name and the operation") {
  auto b = open_host();
  HostDriver::fail_next(Op::malloc, testing::kOutOfMemory);
  auto p = b->allocate(1000);
  REQUIRE_FALSE(p.ok());
  CHECK(p.error().code == ErrorCode::out_of_memory);
  CHECK(p.error().native == "hostErrorMemoryAllocation");
  CHECK(p.error().to_string().find("allocate 1000 bytes") != std::string::npos);
  CHECK(b->allocate(std::uint64_t{1} << 62).code() == ErrorCode::out_of_memory);
  CHECK(b->allocate(~std::uint64_t{0}, 4096).code() == ErrorCode::overflow);
  CHECK(b->counters().live_allocations == 0);
}

TEST_CASE("transfers: offsets, bounds, overlap") {
  auto b = open_host();
  const std::vector<float> data = {1, 2, 3, 4, 5, 6, 7, 8};
  auto p = b->allocate(32);
  auto q = b->allocate(32);
  REQUIRE(p.ok());
  REQUIRE(q.ok());
  REQUIRE(b->copy_to_device(*p, 0, bytes_of(data)).ok());
  REQUIRE(b->copy_device(*q, 8, *p, 0, 24).ok());
  REQUIRE(b->synchronize().ok());
  std::vector<float> back(6);
  REQUIRE(b->copy_to_host(std::as_writable_bytes(std::span(back)), *q, 8).ok());
  CHECK(back == std::vector<float>{1, 2, 3, 4, 5, 6});

  const Status past = b->copy_to_device(*p, 4, bytes_of(data));
  CHECK(past.code() == ErrorCode::out_of_bounds);
  CHECK(b->copy_device(*p, 0, *p, 8, 16).code() == ErrorCode::invalid_argument);
  std::vector<std::byte> sink(4);
  CHECK(b->copy_to_host(sink, 999, 0).code() == ErrorCode::invalid_argument);
  CHECK(b->copy_to_host(sink, *p, ~std::uint64_t{0}).code() == ErrorCode::overflow);
  CHECK(b->free(*p).ok());
  CHECK(b->free(*q).ok());
}

TEST_CASE("registration: a whole mapping once; a weight straddling its middle is read contiguously through base + offset") {
  auto b = open_host();
  // A "mapping" of 4096 f32 values; the weight is 64x8 values starting 5 values before the middle.
  std::vector<float> mapping(4096);
  for (std::size_t i = 0; i < mapping.size(); ++i) mapping[i] = static_cast<float>(i) * 0.25f - 100.0f;
  auto base = b->register_host(mapping.data(), mapping.size() * 4, HostAccess::read_only);
  REQUIRE_MESSAGE(base.ok(), base.error().to_string());
  CHECK(*base != reinterpret_cast<std::uintptr_t>(mapping.data()));  // the emulated device sees it elsewhere
  CHECK(b->counters().live_registrations == 1);
  CHECK(HostDriver::live_registrations() == 1);

  const std::uint64_t first = 2048 - 5, count = 64 * 8;
  DerivationLaunch l;
  l.kind = Derivation::to_f16;
  l.src_type = DataType::float32;
  l.rows = 64;
  l.cols = 8;
  l.src = *base + first * 4;
  auto dst = b->allocate(count * 2);
  REQUIRE(dst.ok());
  l.dst = *dst;
  REQUIRE(b->launch(l).ok());
  REQUIRE(b->synchronize().ok());
  const auto got = download(*b, *dst, count * 2);
  std::vector<std::uint16_t> halves(count);
  std::memcpy(halves.data(), got.data(), got.size());
  for (std::uint64_t i = 0; i < count; ++i) {
    CAPTURE(i);
    CHECK(halves[i] == reference::f16_from_f32(mapping[first + i]));
  }

  // Read-only is honoured: nothing writes into the registration.
  l.kind = Derivation::transpose;
  l.src = *dst;
  l.src_type = DataType::float16;
  l.dst = *base;
  const Status write = b->launch(l);
  CHECK(write.code() == ErrorCode::invalid_argument);
  CHECK(write.error().message.find("read-only") != std::string::npos);
  CHECK(b->copy_to_device(*base, 0, bytes_of({1.0f})).code() == ErrorCode::invalid_argument);

  // A read past the end of the registration is refused before the driver sees it.
  l.kind = Derivation::to_f16;
  l.src_type = DataType::float32;
  l.src = *base + (4096 - 100) * 4;
  l.dst = *dst;
  const int enqueued = HostDriver::calls(Op::enqueue);
  CHECK(b->launch(l).code() == ErrorCode::out_of_bounds);
  CHECK(HostDriver::calls(Op::enqueue) == enqueued);

  CHECK(b->unregister_host(*base).ok());
  CHECK(b->unregister_host(*base).code() == ErrorCode::invalid_argument);
  CHECK(b->counters().live_registrations == 0);
  CHECK(HostDriver::live_registrations() == 0);
  // ...and the same range can be registered again.
  auto again = b->register_host(mapping.data(), mapping.size() * 4, HostAccess::read_only);
  REQUIRE(again.ok());
  CHECK(b->unregister_host(*again).ok());
  CHECK(b->free(*dst).ok());
}

TEST_CASE("registration: unaligned ranges are widened internally and the pointer still points at the host bytes") {
  auto b = open_host();
  std::vector<std::byte> mapping(1000);
  for (std::size_t i = 0; i < mapping.size(); ++i) mapping[i] = static_cast<std::byte>(i * 7);
  const std::byte* host = mapping.data() + 13;  // not 64-byte aligned
  auto p = b->register_host(host, 500, HostAccess::read_write);
  REQUIRE(p.ok());
  std::vector<std::byte> back(500);
  REQUIRE(b->copy_to_host(back, *p, 0).ok());
  CHECK(std::memcmp(back.data(), host, 500) == 0);
  std::vector<std::byte> too_far(501);
  CHECK(b->copy_to_host(too_far, *p, 0).code() == ErrorCode::out_of_bounds);
  CHECK(b->unregister_host(*p).ok());
}

TEST_CASE("registration: driver failures are errors with the driver's name and leave nothing registered") {
  auto b = open_host();
  std::vector<float> mapping(256, 1.0f);
  HostDriver::fail_next(Op::host_register, testing::kOutOfMemory);
  auto failed = b->register_host(mapping.data(), 1024, HostAccess::read_only);
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.error().native == "hostErrorMemoryAllocation");
  CHECK(failed.error().to_string().find("register [") != std::string::npos);
  CHECK(failed.error().to_string().find("+1024 bytes) read-only") != std::string::npos);

  HostDriver::fail_next(Op::host_device_pointer, testing::kInvalidValue);
  auto no_pointer = b->register_host(mapping.data(), 1024, HostAccess::read_only);
  REQUIRE_FALSE(no_pointer.ok());
  CHECK(no_pointer.error().native == "hostErrorInvalidValue");
  CHECK(HostDriver::live_registrations() == 0);  // rolled back
  CHECK(b->counters().live_registrations == 0);

  auto ok = b->register_host(mapping.data(), 1024, HostAccess::read_only);
  REQUIRE(ok.ok());
  // Straddling the end of a pinned range: the runtime refuses to pin pages twice.
  auto straddling = b->register_host(mapping.data() + 128, 1024, HostAccess::read_only);
  REQUIRE_FALSE(straddling.ok());
  CHECK(straddling.error().native == "hostErrorHostMemoryAlreadyRegistered");
  CHECK(b->counters().live_registrations == 1);
  CHECK(b->unregister_host(*ok).ok());
  CHECK(b->register_host(nullptr, 10, HostAccess::read_only).code() == ErrorCode::invalid_argument);
  CHECK(b->register_host(mapping.data(), 0, HostAccess::read_only).code() == ErrorCode::invalid_argument);
}

TEST_CASE("registration: a range inside one already registered shares its pinned pages") {
  auto b = open_host();
  std::vector<std::byte> mapping(8192);
  for (std::size_t i = 0; i < mapping.size(); ++i) mapping[i] = static_cast<std::byte>(i * 13 + 1);
  auto whole = b->register_host(mapping.data(), mapping.size(), HostAccess::read_only);
  REQUIRE(whole.ok());
  auto part = b->register_host(mapping.data() + 4096 + 16, 2048, HostAccess::read_only);
  REQUIRE_MESSAGE(part.ok(), part.error().to_string());
  auto twice = b->register_host(mapping.data() + 4096 + 16, 2048, HostAccess::read_only);
  REQUIRE(twice.ok());
  CHECK(*part == *whole + 4096 + 16);
  CHECK(HostDriver::live_registrations() == 1);
  CHECK(b->counters().live_registrations == 3);
  CHECK(download(*b, *part, 2048) == std::vector<std::byte>(mapping.begin() + 4112, mapping.begin() + 4112 + 2048));
  // A read-write handle cannot ride on read-only pinned pages.
  CHECK_FALSE(b->register_host(mapping.data() + 64, 64, HostAccess::read_write).ok());

  CHECK(b->unregister_host(*whole).ok());
  CHECK(HostDriver::live_registrations() == 1);  // still used by `part`
  CHECK(download(*b, *part, 16) == std::vector<std::byte>(mapping.begin() + 4112, mapping.begin() + 4128));
  CHECK(b->unregister_host(*part).ok());
  CHECK(b->unregister_host(*twice).ok());
  CHECK(b->unregister_host(*twice).code() == ErrorCode::invalid_argument);
  CHECK(HostDriver::live_registrations() == 0);
  CHECK(b->counters().live_registrations == 0);
}

TEST_CASE("registration: without read-only support, read-only requests are unsupported and say why") {
  auto b = open_host(1, false);
  CHECK(b->capabilities().host_registration);
  CHECK_FALSE(b->capabilities().read_only_registration);
  CHECK_FALSE(b->capabilities().host_registration_note.empty());
  CHECK(b->capabilities().import_alignment == 64);
  std::vector<std::byte> mapping(256);
  auto ro = b->register_host(mapping.data(), mapping.size(), HostAccess::read_only);
  REQUIRE_FALSE(ro.ok());
  CHECK(ro.error().code == ErrorCode::unsupported);
  CHECK(HostDriver::calls(Op::host_register) == 0);
  auto rw = b->register_host(mapping.data(), mapping.size(), HostAccess::read_write);
  REQUIRE(rw.ok());
  CHECK(b->unregister_host(*rw).ok());
}

TEST_CASE("launch: shapes and operands are validated before the driver sees them") {
  auto b = open_host();
  auto src = b->allocate(64);
  auto dst = b->allocate(64);
  REQUIRE(src.ok());
  REQUIRE(dst.ok());
  const int before = HostDriver::calls(Op::enqueue);

  DerivationLaunch l;
  l.kind = Derivation::dequant_int4;
  l.src_type = DataType::float32;
  l.rows = 2;
  l.cols = 32;
  l.block_size = 24;  // not a power of two
  l.src = *src;
  l.dst = *dst;
  const Status bad_block = b->launch(l);
  CHECK(bad_block.code() == ErrorCode::invalid_argument);
  CHECK(bad_block.error().context.find("launch dequant_int4") != std::string::npos);

  l.block_size = 16;
  l.scales = 0;  // missing
  CHECK(b->launch(l).code() == ErrorCode::invalid_argument);

  l.scales = *src + 32;  // 2x2 f32 scales = 16 bytes, inside src
  l.dst = *dst;          // output needs 2*32*2 = 128 bytes > 64
  const Status small = b->launch(l);
  CHECK(small.code() == ErrorCode::out_of_bounds);
  CHECK(small.error().message.find("dst") != std::string::npos);

  DerivationLaunch t;
  t.kind = Derivation::transpose;
  t.src_type = DataType::float32;
  t.rows = 4;
  t.cols = 4;
  t.src = *src;
  t.dst = *src;  // in place
  CHECK(b->launch(t).code() == ErrorCode::invalid_argument);
  t.src_type = DataType::string;
  CHECK(b->launch(t).code() == ErrorCode::unsupported);
  CHECK(HostDriver::calls(Op::enqueue) == before);

  DerivationLaunch empty;
  empty.kind = Derivation::to_f16;
  empty.src_type = DataType::float32;
  CHECK(b->launch(empty).ok());  // nothing to do, no pointers needed
  CHECK(b->free(*src).ok());
  CHECK(b->free(*dst).ok());
}

TEST_CASE("launch: every derivation through the backend matches the scalar reference") {
  auto b = open_host();
  for (const test_cases::DerivationCase& c : test_cases::kernel_cases()) {
    CAPTURE(c.label);
    auto sizes = derivation_sizes(c.shape);
    REQUIRE(sizes.ok());
    DerivationLaunch l = c.shape;
    l.src = upload(*b, c.src);
    if (!c.scales.empty()) l.scales = upload(*b, c.scales);
    if (!c.zero_points.empty()) l.zero_point = upload(*b, c.zero_points);
    l.dst = *b->allocate(sizes->dst_bytes);
    if (sizes->dst2_bytes) l.dst2 = *b->allocate(sizes->dst2_bytes);
    const Status s = b->launch(l);
    REQUIRE_MESSAGE(s.ok(), s.to_string());
    REQUIRE(b->synchronize().ok());
    const auto dst = download(*b, l.dst, sizes->dst_bytes);
    const auto dst2 = sizes->dst2_bytes ? download(*b, l.dst2, sizes->dst2_bytes) : std::vector<std::byte>{};
    auto expected = reference::derive(c.shape, {c.src, c.scales, c.zero_points});
    REQUIRE(expected.ok());
    const auto cmp = reference::compare(c.shape, *expected, dst, dst2);
    CHECK_MESSAGE(cmp.ok, cmp.message);
    for (DevicePtr p : {l.src, l.scales, l.zero_point, l.dst, l.dst2})
      if (p != 0) CHECK(b->free(p).ok());
  }
  CHECK(b->counters().live_allocations == 0);
}

TEST_CASE("sticky errors are reported by synchronize and by every later call, with the driver's name") {
  auto b = open_host();
  auto p = b->allocate(16);
  REQUIRE(p.ok());
  HostDriver::fail_next(Op::stream_synchronize, testing::kIllegalAddress);
  const Status sync = b->synchronize();
  REQUIRE_FALSE(sync.ok());
  CHECK(sync.code() == ErrorCode::device_error);
  CHECK(sync.error().native == "hostErrorIllegalAddress");

  auto later = b->allocate(16);
  REQUIRE_FALSE(later.ok());
  CHECK(later.error().native == "hostErrorIllegalAddress");
  CHECK(later.error().message.find("unusable") != std::string::npos);
  CHECK(b->synchronize().error().native == "hostErrorIllegalAddress");

  // A non-sticky failure is reported once and then forgotten.
  auto fresh = open_host();
  HostDriver::fail_next(Op::enqueue, testing::kInvalidValue);
  auto src = fresh->allocate(16);
  auto dst = fresh->allocate(16);
  DerivationLaunch l;
  l.kind = Derivation::transpose;
  l.src_type = DataType::float32;
  l.rows = 2;
  l.cols = 2;
  l.src = *src;
  l.dst = *dst;
  const Status first = fresh->launch(l);
  CHECK(first.error().native == "hostErrorInvalidValue");
  CHECK(first.error().to_string().find("launch transpose") != std::string::npos);
  CHECK(fresh->launch(l).ok());
}

TEST_CASE("launches and allocations from several threads keep the counters right") {
  // What earlier tests left in the emulated driver: the sticky-error test's
  // allocation, which its backend could not free (every call after a sticky
  // error is refused, a free at teardown too; on a real device the dead
  // context takes its memory with it).
  const auto before = HostDriver::live_allocations();
  auto b = open_host();
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        auto src = b->allocate(64 * 4);
        auto dst = b->allocate(64 * 2);
        if (!src || !dst) {
          ++failures;
          continue;
        }
        DerivationLaunch l;
        l.kind = Derivation::to_f16;
        l.src_type = DataType::float32;
        l.rows = 8;
        l.cols = 8;
        l.src = *src;
        l.dst = *dst;
        if (!b->launch(l) || !b->free(*src) || !b->free(*dst)) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(failures == 0);
  CHECK(b->synchronize().ok());
  CHECK(b->counters().live_allocations == 0);
  CHECK(HostDriver::live_allocations() == before);
}
