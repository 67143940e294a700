// Running out of host memory never strands a waiter (issue 12): every
// allocation of a get_or_build call, in turn, is made to throw
// std::bad_alloc, with a build that fails, one that throws and one that
// succeeds, while another thread waits on the same key. Each run must end
// with the builder holding a value or an error, the waiter woken with one,
// and the key usable afterwards; release() likewise. This binary replaces
// the global operator new, so it is a test of its own.
#include "support/thread_failing_new.hpp"
#include "support/forwarding.hpp"
#include <ballast/derived_weights.hpp>
#include <doctest/doctest.h>

#include "unit/memo/recording_backend.hpp"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <new>
#include <stdexcept>
#include <thread>

using ballast::testing::t_allocations_left;
using ballast::testing::t_failed;

using namespace ballast;
using ballast::test::key_of;
using ballast::test::RecordingBackend;

namespace {

// The test double records frees in a vector; a real backend never throws
// (GpuBackend's contract), so its calls run with injection paused.
template <class F>
auto paused(F f) {
  const long left = t_allocations_left;
  t_allocations_left = -1;
  auto r = f();
  t_allocations_left = left;
  return r;
}

// The recording double's own bookkeeping runs with injection paused; the
// record GpuBackend keeps in front of it stays armed (it must turn a
// failed insert into out_of_memory and give the allocation back).
class Unarmed final : public GpuBackend {
 public:
  explicit Unarmed(RecordingBackend& inner) : inner_(inner) {}

 private:
  const DeviceInfo& do_info() const override { return inner_.info(); }
  const Capabilities& do_capabilities() const override { return inner_.capabilities(); }
  Result<BackendRange> do_allocate(std::uint64_t b, std::uint64_t a) override {
    return ::ballast::testing::forwarded(paused([&] { return inner_.allocate(b, a); }));
  }
  Status do_free(const BackendRange& p_in, std::uint64_t) override { const DevicePtr p = p_in.ptr; return paused([&] { return inner_.free(p); }); }
  Status do_copy_to_device(const ResolvedOperand& d_in, std::span<const std::byte> s) override { const DevicePtr d = d_in.ptr; return inner_.copy_to_device(d, 0, s); }
  Status do_copy_to_host(std::span<std::byte> d, const ResolvedOperand& s_in) override { const DevicePtr s = s_in.ptr; return inner_.copy_to_host(d, s, 0); }
  Status do_copy_device(const ResolvedOperand& d_in, const ResolvedOperand& s_in, std::uint64_t n) override { const DevicePtr d = d_in.ptr, s = s_in.ptr; return inner_.copy_device(d, 0, s, 0, n); }
  Result<BackendRange> do_register_host(const void* h, std::uint64_t b, HostAccess a) override { return ::ballast::testing::forwarded(inner_.register_host(h, b, a)); }
  Status do_unregister_host(const BackendRange& p_in, std::uint64_t, HostAccess) override { const DevicePtr p = p_in.ptr; return inner_.unregister_host(p); }
  Status do_launch(const DerivationLaunch& l, const DerivationSizes&, const LaunchOperands&) override { return inner_.launch(l); }
  Status do_synchronize() override { return inner_.synchronize(); }

  RecordingBackend& inner_;
};

enum class BuildOutcome { fails, throws, succeeds };

// One run: the armed builder fails its n-th allocation; a waiter joins the
// same key while the build is in flight. Returns whether the n-th
// allocation was reached (false: the whole call ran without failing).
bool run_once(long n, BuildOutcome outcome) {
  RecordingBackend gpu;
  DerivedWeights memo;
  const DerivationKey key = key_of(0x1000);
  // Set by the builder thread: true when the build starts, false when
  // get_or_build returns without starting it (the armed allocation hit
  // first: then there is no flight to wait on, and waiting out a timeout
  // for a start that never comes made this test take 75 s).
  std::promise<bool> started;
  bool build_started = false;
  std::promise<void> go;
  auto go_future = go.get_future().share();
  std::future<Result<DevicePtr>> waiter;
  bool reached = false;
  {
    auto builder = std::async(std::launch::async, [&]() -> Result<DevicePtr> {
      t_allocations_left = n;
      auto r = memo.get_or_build_ptr(derive::transpose, key, [&]() -> Result<DerivedPtr> {
        build_started = true;
        started.set_value(true);
        go_future.wait();  // the waiter is queued on this build by now
        switch (outcome) {
          case BuildOutcome::fails: return make_error(ErrorCode::device_error, "the kernel failed");
          case BuildOutcome::throws: throw std::runtime_error("the build threw");
          case BuildOutcome::succeeds: break;
        }
        auto p = gpu.allocate(64);
        if (!p.ok()) return p.error();
        return DerivedPtr{*p, 64};
      });
      reached = t_failed;
      t_allocations_left = -1;
      t_failed = false;
      if (!build_started) started.set_value(false);
      return r;
    });
    // If the armed allocation hits before the build starts, the builder
    // returns out_of_memory and there is no flight to join.
    auto s = started.get_future();
    REQUIRE(s.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    if (s.get()) {
      waiter = std::async(std::launch::async, [&] {
        return memo.get_or_build_ptr(derive::transpose, key, [&]() -> Result<DerivedPtr> {
          auto p = gpu.allocate(64);
          if (!p.ok()) return p.error();
          return DerivedPtr{*p, 64};
        });
      });
      // Give the waiter time to queue on the flight (it may also arrive
      // after the build: then it hits or builds, which is just as fine).
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    go.set_value();
    REQUIRE(builder.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    const auto r = builder.get();
    if (!r.ok()) {
      const auto code = r.code();
      CHECK((code == ErrorCode::out_of_memory || code == ErrorCode::device_error || code == ErrorCode::internal));
    }
  }
  if (waiter.valid()) {
    // Never blocked forever: the waiter gets a value or an error.
    REQUIRE_MESSAGE(waiter.wait_for(std::chrono::seconds(10)) == std::future_status::ready,
                    "a waiter was stranded after allocation " << n);
    (void)waiter.get();
  }
  // The key is usable afterwards: a fresh build (or the memoized value).
  auto again = memo.get_or_build_ptr(derive::transpose, key, [&]() -> Result<DerivedPtr> {
    auto p = gpu.allocate(64);
    if (!p.ok()) return p.error();
    return DerivedPtr{*p, 64};
  });
  CHECK_MESSAGE(again.ok(), again.error().to_string());
  CHECK(memo.len() == 1);
  CHECK(memo.release(gpu).status.ok());
  CHECK(gpu.counters().live_allocations == 0);
  return reached;
}

}  // namespace

TEST_CASE("an allocation failure anywhere in get_or_build strands no waiter and leaves the key usable") {
  for (BuildOutcome outcome : {BuildOutcome::fails, BuildOutcome::throws, BuildOutcome::succeeds}) {
    CAPTURE(static_cast<int>(outcome));
    long n = 0;
    for (; n < 200; ++n) {
      CAPTURE(n);
      if (!run_once(n, outcome)) break;  // no allocation left to fail
    }
    CHECK(n < 200);
    MESSAGE("outcome " << static_cast<int>(outcome) << ": " << n << " allocation points, each made to fail");
  }
}

TEST_CASE("an allocation failure in release() still frees every value and empties the memo") {
  for (long n = 0; n < 200; ++n) {
    CAPTURE(n);
    RecordingBackend recorder;
    Unarmed gpu(recorder);
    DerivedWeights memo;
    for (std::uint64_t k = 1; k <= 20; ++k) {
      auto v = memo.get_or_build_ptr(derive::transpose, key_of(k * 0x100), [&]() -> Result<DerivedPtr> {
        auto p = gpu.allocate(32);
        if (!p.ok()) return p.error();
        return DerivedPtr{*p, 32};
      });
      REQUIRE(v.ok());
    }
    t_allocations_left = n;
    Released r;
    try {
      r = memo.release(gpu);
    } catch (const std::bad_alloc&) {
      t_allocations_left = -1;
      FAIL("release() let std::bad_alloc escape at allocation " << n);
    }
    const bool reached = t_failed;
    t_allocations_left = -1;
    t_failed = false;
    // Values a failed allocation kept from being taken stay memoized (never
    // lost), and a second release frees them.
    if (memo.len() != 0) CHECK(memo.release(gpu).status.ok());
    CHECK(memo.len() == 0);
    CHECK(gpu.counters().live_allocations == 0);
    if (!reached) break;
  }
}
