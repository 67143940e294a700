// FaultInjectingBackend itself, around the backend under test: what it
// counts, what a failed call of each operation does (and does not do) to
// the wrapped backend, and the lost-device mode.
#include "support/text.hpp"
#include "faults/fault_sweep.hpp"
#include "support/fault_injecting_backend.hpp"

#include <ballast/backend_registry.hpp>
#include <ballast/log.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

using namespace ballast;
using namespace ballast::testing;
using ballast::faults::backend;

namespace {

using ballast::testing::contains;

std::vector<float> matrix(std::size_t rows, std::size_t cols) {
  std::vector<float> m(rows * cols);
  for (std::size_t i = 0; i < m.size(); ++i) m[i] = static_cast<float>(i) * 0.5f;
  return m;
}

DerivationLaunch transpose_of(DevicePtr src, DevicePtr dst, std::uint64_t rows, std::uint64_t cols) {
  DerivationLaunch l;
  l.kind = Derivation::transpose;
  l.src_type = DataType::float32;
  l.rows = rows;
  l.cols = cols;
  l.src = src;
  l.dst = dst;
  return l;
}

struct Baseline {
  GpuBackend& inner;
  AllocationCounters at;
  explicit Baseline(GpuBackend& b) : inner(b), at(b.counters()) {}
  bool back() const {
    const AllocationCounters now = inner.counters();
    return now.live_allocations == at.live_allocations && now.live_bytes == at.live_bytes &&
           now.live_registrations == at.live_registrations;
  }
};

}  // namespace

TEST_CASE("calls are counted per operation as they reach the backend; nothing fails unarmed") {
  Baseline base(backend());
  FaultInjectingBackend gpu(backend());
  auto a = gpu.allocate(4 * 64);
  REQUIRE(a.ok());
  auto b = gpu.allocate(4 * 64);
  REQUIRE(b.ok());
  const std::vector<float> m = matrix(8, 8);
  REQUIRE(gpu.copy_to_device(*a, 0, std::as_bytes(std::span(m))).ok());
  REQUIRE(gpu.copy_to_device(*a, 0, {}).ok());  // zero bytes: stops in the core, never counted
  REQUIRE(gpu.launch(transpose_of(*a, *b, 8, 8)).ok());
  REQUIRE(gpu.synchronize().ok());
  std::vector<float> back(64);
  REQUIRE(gpu.copy_to_host(std::as_writable_bytes(std::span(back)), *b, 0).ok());
  CHECK(back[1] == m[8]);
  REQUIRE(gpu.copy_device(*a, 0, *b, 0, 64).ok());
  CHECK(gpu.free(12345).code() == ErrorCode::invalid_argument);  // refused by the core: not counted
  REQUIRE(gpu.free(*a).ok());
  REQUIRE(gpu.free(*b).ok());
  CHECK(gpu.calls(FaultOp::allocate) == 2);
  CHECK(gpu.calls(FaultOp::copy_to_device) == 1);
  CHECK(gpu.calls(FaultOp::launch) == 1);
  CHECK(gpu.calls(FaultOp::synchronize) == 1);
  CHECK(gpu.calls(FaultOp::copy_to_host) == 1);
  CHECK(gpu.calls(FaultOp::copy_device) == 1);
  CHECK(gpu.calls(FaultOp::free) == 2);
  CHECK(gpu.injected().empty());
  CHECK(base.back());
  // The decorator speaks for the wrapped backend.
  CHECK(gpu.info().backend == backend().info().backend);
  CHECK(gpu.capabilities().host_registration == backend().capabilities().host_registration);
}

TEST_CASE("a failed allocate allocates nothing and says so in the backend's words") {
  Baseline base(backend());
  FaultInjectingBackend gpu(backend());
  gpu.fail_nth(FaultOp::allocate, 2);
  auto first = gpu.allocate(64);
  REQUIRE(first.ok());
  const AllocationCounters one = backend().counters();
  auto second = gpu.allocate(64);
  REQUIRE_FALSE(second.ok());
  CHECK(second.code() == ErrorCode::out_of_memory);
  const std::string text = second.error().to_string();
  CAPTURE(text);
  CHECK(contains(text, backend().info().backend + ": allocate 64 bytes"));
  CHECK(contains(text, "injected at call 2 of allocate"));
  CHECK(second.error().native == realistic_error(backend().info().backend, FaultOp::allocate).native);
  CHECK(backend().counters().live_allocations == one.live_allocations);  // the wrapped backend never saw it
  // `once`: the next call passes.
  auto third = gpu.allocate(64);
  REQUIRE(third.ok());
  CHECK(gpu.calls(FaultOp::allocate) == 3);
  REQUIRE(gpu.injected().size() == 1);
  CHECK(gpu.injected()[0].call == 2);
  REQUIRE(gpu.free(*first).ok());
  REQUIRE(gpu.free(*third).ok());
  CHECK(base.back());
}

TEST_CASE("a refused free keeps the allocation live in both records, and it can be freed again") {
  Baseline base(backend());
  FaultInjectingBackend gpu(backend());
  auto a = gpu.allocate(100);
  REQUIRE(a.ok());
  gpu.fail_nth(FaultOp::free, 1);
  const Status refused = gpu.free(*a);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.code() == ErrorCode::device_error);
  CHECK(contains(refused.to_string(), backend().info().backend + ": free 0x"));
  CHECK(gpu.kept_allocations() == std::vector<DevicePtr>{*a});
  CHECK(gpu.counters().live_allocations == 1);
  CHECK(backend().counters().live_allocations == base.at.live_allocations + 1);
  REQUIRE(gpu.injected().size() == 1);
  CHECK(gpu.injected()[0].ptr == *a);
  CHECK(gpu.injected()[0].bytes == 100);
  // Still usable: it is live.
  std::vector<std::byte> bytes(100, std::byte{7});
  CHECK(gpu.copy_to_device(*a, 0, bytes).ok());
  REQUIRE(gpu.free(*a).ok());  // the 2nd call: passes
  CHECK(gpu.kept_allocations().empty());
  CHECK(gpu.counters().live_allocations == 0);
  CHECK(base.back());
}

// A Residency asks again for a free the device refused whenever room is
// short, so a lost device refuses the same pointer many times: it is listed
// once, and one successful free ends it (a stale entry would later free
// whatever allocation reused the address).
TEST_CASE("a free refused twice is kept once; one free after the fault ends it") {
  Baseline base(backend());
  FaultInjectingBackend gpu(backend());
  auto a = gpu.allocate(100);
  REQUIRE(a.ok());
  const std::size_t page = 4096;
  std::vector<std::byte> storage(2 * page);
  void* host = storage.data() + (page - reinterpret_cast<std::uintptr_t>(storage.data()) % page) % page;
  Result<DevicePtr> r = make_error(ErrorCode::unsupported, "no host registration");
  if (backend().capabilities().host_registration) {
    r = gpu.register_host(host, page, HostAccess::read_write);
    REQUIRE_MESSAGE(r.ok(), r.error().to_string());
  }
  gpu.fail_nth(FaultOp::free, 1, FaultInjectingBackend::Fault::from_then_on);
  CHECK_FALSE(gpu.free(*a).ok());
  CHECK_FALSE(gpu.free(*a).ok());
  if (r.ok()) {
    CHECK_FALSE(gpu.unregister_host(*r).ok());
    CHECK_FALSE(gpu.unregister_host(*r).ok());
    CHECK(gpu.kept_registrations() == std::vector<DevicePtr>{*r});
  }
  CHECK(gpu.kept_allocations() == std::vector<DevicePtr>{*a});
  gpu.disarm();
  for (DevicePtr p : gpu.kept_allocations()) CHECK(gpu.free(p).ok());
  for (DevicePtr p : gpu.kept_registrations()) CHECK(gpu.unregister_host(p).ok());
  CHECK(gpu.kept_allocations().empty());
  CHECK(gpu.kept_registrations().empty());
  CHECK(base.back());
}

TEST_CASE("failed copies and launches leave the device as it was") {
  Baseline base(backend());
  FaultInjectingBackend gpu(backend());
  auto a = gpu.allocate(4 * 64);
  auto b = gpu.allocate(4 * 64);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  const std::vector<float> m = matrix(8, 8);
  const std::vector<float> zeros(64, 0.0f);
  REQUIRE(gpu.copy_to_device(*a, 0, std::as_bytes(std::span(m))).ok());
  REQUIRE(gpu.copy_to_device(*b, 0, std::as_bytes(std::span(zeros))).ok());

  gpu.fail_nth(FaultOp::copy_to_device, 1);
  const std::vector<float> other(64, 9.0f);
  const Status up = gpu.copy_to_device(*a, 0, std::as_bytes(std::span(other)));
  CHECK(up.code() == ErrorCode::device_error);
  CHECK(contains(up.to_string(), "host to device"));

  gpu.fail_nth(FaultOp::launch, 1);
  const Status launched = gpu.launch(transpose_of(*a, *b, 8, 8));
  CHECK(launched.code() == ErrorCode::device_error);
  CHECK(contains(launched.to_string(), backend().info().backend + ": launch transpose"));
  REQUIRE(gpu.synchronize().ok());

  std::vector<float> got(64, -1.0f);
  gpu.fail_nth(FaultOp::copy_to_host, 1);
  const Status down = gpu.copy_to_host(std::as_writable_bytes(std::span(got)), *b, 0);
  CHECK(down.code() == ErrorCode::device_error);
  CHECK(contains(down.to_string(), "device to host"));
  CHECK(got == std::vector<float>(64, -1.0f));  // nothing was copied

  gpu.fail_nth(FaultOp::copy_device, 1);
  CHECK(gpu.copy_device(*b, 0, *a, 0, 16).code() == ErrorCode::device_error);

  gpu.disarm();
  REQUIRE(gpu.copy_to_host(std::as_writable_bytes(std::span(got)), *b, 0).ok());
  CHECK(got == zeros);  // no launch ran, no device copy ran
  REQUIRE(gpu.copy_to_host(std::as_writable_bytes(std::span(got)), *a, 0).ok());
  CHECK(got == m);  // the failed upload wrote nothing
  REQUIRE(gpu.free(*a).ok());
  REQUIRE(gpu.free(*b).ok());
  CHECK(base.back());
}

TEST_CASE("a failed synchronize reports after the work drained") {
  Baseline base(backend());
  FaultInjectingBackend gpu(backend());
  auto a = gpu.allocate(4 * 64);
  auto b = gpu.allocate(4 * 64);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  const std::vector<float> m = matrix(8, 8);
  REQUIRE(gpu.copy_to_device(*a, 0, std::as_bytes(std::span(m))).ok());
  gpu.fail_nth(FaultOp::synchronize, 1);
  REQUIRE(gpu.launch(transpose_of(*a, *b, 8, 8)).ok());
  const Status s = gpu.synchronize();
  CHECK(s.code() == ErrorCode::device_error);
  CHECK(contains(s.to_string(), backend().info().backend + ": synchronize"));
  // The wrapped backend waited: freeing what the launch used is safe now.
  REQUIRE(gpu.free(*a).ok());
  REQUIRE(gpu.free(*b).ok());
  CHECK(base.back());
}

TEST_CASE("host registration: a refused register registers nothing, a refused unregister keeps it") {
  if (!backend().capabilities().host_registration) {
    MESSAGE("skipped: " << backend().info().backend << " registers no host memory");
    return;
  }
  Baseline base(backend());
  FaultInjectingBackend gpu(backend());
  const std::size_t page = 4096;
  std::vector<std::byte> storage(4 * page);
  void* host = storage.data() + (page - reinterpret_cast<std::uintptr_t>(storage.data()) % page) % page;
  gpu.fail_nth(FaultOp::register_host, 1);
  auto refused = gpu.register_host(host, page, HostAccess::read_write);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.code() == ErrorCode::out_of_memory);
  CHECK(contains(refused.error().to_string(), backend().info().backend + ": register"));
  CHECK(backend().counters().live_registrations == base.at.live_registrations);

  auto reg = gpu.register_host(host, page, HostAccess::read_write);
  REQUIRE_MESSAGE(reg.ok(), reg.error().to_string());
  gpu.fail_nth(FaultOp::unregister_host, 1);
  const Status kept = gpu.unregister_host(*reg);
  CHECK(kept.code() == ErrorCode::device_error);
  CHECK(contains(kept.to_string(), "unregister host memory at 0x"));
  CHECK(gpu.kept_registrations() == std::vector<DevicePtr>{*reg});
  CHECK(backend().counters().live_registrations == base.at.live_registrations + 1);
  REQUIRE(gpu.unregister_host(*reg).ok());
  CHECK(gpu.kept_registrations().empty());
  CHECK(base.back());
}

TEST_CASE("from_then_on: a lost device fails every later call of every operation until disarmed") {
  Baseline base(backend());
  FaultInjectingBackend gpu(backend());
  auto a = gpu.allocate(64);
  REQUIRE(a.ok());
  gpu.fail_nth(FaultOp::launch, 1, FaultInjectingBackend::Fault::from_then_on);
  auto b = gpu.allocate(64);  // before the fault: fine
  REQUIRE(b.ok());
  CHECK(gpu.launch(transpose_of(*a, *b, 4, 4)).code() == ErrorCode::device_error);
  CHECK(gpu.allocate(64).code() == ErrorCode::out_of_memory);
  CHECK(gpu.synchronize().code() == ErrorCode::device_error);
  CHECK_FALSE(gpu.free(*a).ok());
  CHECK(gpu.injected().size() == 4);
  CHECK(gpu.kept_allocations() == std::vector<DevicePtr>{*a});
  gpu.disarm();
  REQUIRE(gpu.free(*a).ok());
  REQUIRE(gpu.free(*b).ok());
  CHECK(gpu.kept_allocations().empty());
  CHECK(gpu.counters().live_allocations == 0);
  CHECK(base.back());
}

TEST_CASE("realistic errors: out of memory for allocate and register, a device error for the rest") {
  for (const char* name : {"cpu", "cuda", "hip", "vulkan", "mine"}) {
    CAPTURE(name);
    for (FaultOp op : kAllFaultOps) {
      CAPTURE(fault_op_name(op));
      const Error e = realistic_error(name, op);
      const bool memory = op == FaultOp::allocate || op == FaultOp::register_host;
      CHECK(e.code == (memory ? ErrorCode::out_of_memory : ErrorCode::device_error));
      CHECK_FALSE(e.native.empty());
      CHECK(contains(e.message, e.native));
    }
  }
  CHECK(realistic_error("vulkan", FaultOp::allocate).native == "VK_ERROR_OUT_OF_DEVICE_MEMORY");
  CHECK(realistic_error("vulkan", FaultOp::synchronize).native == "VK_ERROR_DEVICE_LOST");
  CHECK(realistic_error("cuda", FaultOp::allocate).native == "CUDA_ERROR_OUT_OF_MEMORY");
}

// Not injected: the driver itself refusing an allocation larger than the
// whole device heap, across the plugin boundary. The backend's own limit
// (max_single_allocation) would refuse it before the driver sees it, so the
// backend is opened again with that limit lifted (vulkan?max_allocation=).
TEST_CASE("vulkan: a real VK_ERROR_OUT_OF_DEVICE_MEMORY, larger than the heap, leaves nothing behind") {
  if (backend().info().backend != "vulkan") {
    MESSAGE("skipped: only the vulkan backend takes max_allocation");
    return;
  }
  std::string config = ballast::faults::backend_config();
  config += (config.find('?') == std::string::npos ? "?" : "&") + std::string("max_allocation=") +
            std::to_string(std::uint64_t{1} << 50);
  // Anything the driver or the validation layer says (a leaked object at
  // teardown, say) is an error message from "vulkan".
  std::vector<std::string> complaints;
  set_log_sink([&complaints](const LogMessage& m) {
    if (m.level == LogLevel::error) complaints.emplace_back(m.text);
  });
  auto opened = open_backend(config);
  REQUIRE_MESSAGE(opened.ok(), opened.error().to_string());
  GpuBackend& gpu = **opened;
  const std::uint64_t heap = gpu.info().memory_bytes;  // every device-local heap
  const std::uint64_t request = std::max<std::uint64_t>(heap * 4, std::uint64_t{8} << 30);
  CAPTURE(heap);
  CAPTURE(request);
  const AllocationCounters before = gpu.counters();
  auto huge = gpu.allocate(request);
  REQUIRE_FALSE(huge.ok());
  const std::string text = huge.error().to_string();
  CAPTURE(text);
  CHECK(huge.code() == ErrorCode::out_of_memory);
  CHECK(huge.error().native == "VK_ERROR_OUT_OF_DEVICE_MEMORY");
  CHECK(contains(text, "vulkan: allocate " + std::to_string(request) + " bytes"));
  const AllocationCounters after = gpu.counters();
  CHECK(after.live_allocations == before.live_allocations);
  CHECK(after.live_bytes == before.live_bytes);
  // The device is still fine: a launch runs, and everything is freed.
  auto a = gpu.allocate(4 * 64);
  auto b = gpu.allocate(4 * 64);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  const std::vector<float> m = matrix(8, 8);
  REQUIRE(gpu.copy_to_device(*a, 0, std::as_bytes(std::span(m))).ok());
  REQUIRE(gpu.launch(transpose_of(*a, *b, 8, 8)).ok());
  REQUIRE(gpu.synchronize().ok());
  std::vector<float> back(64);
  REQUIRE(gpu.copy_to_host(std::as_writable_bytes(std::span(back)), *b, 0).ok());
  CHECK(back[1] == m[8]);
  REQUIRE(gpu.free(*a).ok());
  REQUIRE(gpu.free(*b).ok());
  CHECK(gpu.counters().live_allocations == before.live_allocations);
  opened = make_error(ErrorCode::internal, "closed");  // destroys the backend: the layer checks for leaks
  set_log_sink({});
  CHECK_MESSAGE(complaints.empty(), (complaints.empty() ? std::string() : complaints[0]));
}
