// FaultInjectingBackend: a GpuBackend decorator that makes one chosen call
// of one chosen operation fail, around any backend (cpu, a plugin, your own).
//
//   auto gpu = ballast::open_backend("vulkan");
//   ballast::testing::FaultInjectingBackend faulty(**gpu);
//   ... run your loading path once on `faulty` ...              // counts every call
//   const std::uint64_t launches = faulty.calls(FaultOp::launch);
//   for (std::uint64_t n = 1; n <= launches; ++n) {
//     faulty.fail_nth(FaultOp::launch, n);                      // counts restart at 0
//     ... run it again: it must end in an error naming the launch ...
//     ... tear down ...
//     faulty.disarm();
//     for (DevicePtr p : faulty.kept_allocations()) (void)faulty.free(p);
//     for (DevicePtr p : faulty.kept_registrations()) (void)faulty.unregister_host(p);
//     // faulty.counters() and (*gpu)->counters() are back where they started
//   }
//
// Uses only the public API (<ballast/gpu_backend.hpp>): copy it next to an
// engine's own tests to run the same sweep on its own hardware.
//
// What a call is: one call that reaches the backend, i.e. a public call the
// core's validation let through to do_* (a zero-byte copy, or a launch that
// writes nothing, never reaches a backend and is not counted). Each do_*
// forwards to the wrapped backend's PUBLIC method, so the wrapped backend
// validates and counts everything again on its own.
//
// What a failed call does (precisely):
//   allocate, register_host   return the error; the wrapped backend is not
//                             called (nothing was allocated or registered).
//   free, unregister_host     return the error; the wrapped backend is not
//                             called: the allocation or registration stays
//                             live in BOTH records (this object's core keeps
//                             it, as it does for every refused free), so it
//                             can be freed again once disarmed. Listed by
//                             kept_allocations() / kept_registrations()
//                             until a later free of it succeeds.
//   copy_*, launch            return the error; the wrapped backend is not
//                             called (the copy or kernel never ran).
//   synchronize               waits on the wrapped backend first, then
//                             returns the error: an asynchronous kernel
//                             failure reported at the next wait, with the
//                             device idle, so the caller may free what the
//                             failed work used.
// The error is `realistic_error(backend, op)` unless fail_nth was given
// one: the code and driver name (Error::native) the wrapped backend's
// vendor reports for that call, and a message that ends "(injected at call
// N of <op>)" so a log says what happened.
//
// Modes: Fault::once fails only the Nth call; Fault::from_then_on fails the
// Nth call and every call of EVERY operation after it (a lost device);
// Fault::op_from_then_on fails the Nth call and every later call of the
// same operation only (a device that keeps refusing one thing).
//
// Thread-safe: calls may come from many threads; the count orders them as
// they reach this object.
#pragma once

#include <ballast/gpu_backend.hpp>
#include <ballast/status.hpp>

#include <array>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ballast::testing {

enum class FaultOp : std::uint8_t {
  allocate,
  free,
  register_host,
  unregister_host,
  copy_to_device,
  copy_to_host,
  copy_device,
  launch,
  synchronize,
};
inline constexpr std::size_t kFaultOpCount = 9;
inline constexpr std::array<FaultOp, kFaultOpCount> kAllFaultOps = {
    FaultOp::allocate,        FaultOp::free,           FaultOp::register_host,
    FaultOp::unregister_host, FaultOp::copy_to_device, FaultOp::copy_to_host,
    FaultOp::copy_device,     FaultOp::launch,         FaultOp::synchronize};

// "allocate", "free", "register_host", ... (the GpuBackend method's name).
std::string_view fault_op_name(FaultOp op) noexcept;
// The words the core puts in front of that call's errors ("<backend>: ..."):
// "allocate", "free", "register", "unregister host memory", "host to device",
// "device to host", "device to device", "launch", "synchronize".
std::string_view fault_op_words(FaultOp op) noexcept;

// The error `backend` ("cpu", "cuda", "hip", "vulkan"; anything else gets
// a generic one) reports when `op` fails on a real device: out_of_memory
// for allocate and register_host, device_error (a lost or faulted device)
// for the rest, with the vendor's name for it in Error::native.
Error realistic_error(std::string_view backend, FaultOp op);

// One injected failure, as it happened.
struct InjectedFault {
  FaultOp op = FaultOp::allocate;
  std::uint64_t call = 0;   // which call of `op` (1-based)
  Error error;              // what it returned
  DevicePtr ptr = 0;        // free / unregister_host: the pointer kept live
  std::uint64_t bytes = 0;  // ...and its size
};

class FaultInjectingBackend final : public GpuBackend {
 public:
  enum class Fault : std::uint8_t { once, from_then_on, op_from_then_on };

  // `inner` must outlive this object. Nothing is armed: every call passes.
  explicit FaultInjectingBackend(GpuBackend& inner);
  ~FaultInjectingBackend() override;

  // Restarts every count at 0 and arms: the `nth` (1-based) call of `op`
  // from now on fails with `error` (default: realistic_error for the
  // wrapped backend). Clears injected().
  void fail_nth(FaultOp op, std::uint64_t nth, Fault mode = Fault::once, std::optional<Error> error = {});
  // Nothing fails any more; counts and the record of what failed are kept.
  void disarm();
  // Restarts every count at 0 (a counting run), disarmed.
  void reset_counts();

  // Calls of `op` that reached this backend since the last fail_nth or
  // reset_counts, the failed ones included.
  std::uint64_t calls(FaultOp op) const;
  // Every failure injected since the last fail_nth (once: at most one).
  std::vector<InjectedFault> injected() const;
  // Allocations / registrations whose free this object refused and which
  // have not been freed since: live in this object and in the wrapped
  // backend. Free them (disarmed) to return both to their baseline.
  std::vector<DevicePtr> kept_allocations() const;
  std::vector<DevicePtr> kept_registrations() const;

  GpuBackend& inner() noexcept { return inner_; }

  // Called before each call that reaches this backend is counted, outside
  // any lock, on the caller's thread: a test may hold a call there (a copy
  // kept in flight while another thread waits for it). Set it before the
  // calls it should see, and not while calls are running.
  std::function<void(FaultOp)> before_call;

 private:
  const DeviceInfo& do_info() const override;
  const Capabilities& do_capabilities() const override;
  Result<BackendRange> do_allocate(std::uint64_t bytes, std::uint64_t alignment) override;
  Status do_free(const BackendRange& ptr, std::uint64_t bytes) override;
  Status do_copy_to_device(const ResolvedOperand& dst, std::span<const std::byte> src) override;
  Status do_copy_to_host(std::span<std::byte> dst, const ResolvedOperand& src) override;
  Status do_copy_device(const ResolvedOperand& dst, const ResolvedOperand& src, std::uint64_t bytes) override;
  Result<BackendRange> do_register_host(const void* host, std::uint64_t bytes, HostAccess access) override;
  Status do_unregister_host(const BackendRange& ptr, std::uint64_t bytes, HostAccess access) override;
  Status do_launch(const DerivationLaunch& launch, const DerivationSizes& sizes, const LaunchOperands&) override;
  Status do_synchronize() override;

  // Counts one call of `op`; the error to return when it must fail.
  std::optional<Error> count(FaultOp op, DevicePtr ptr = 0, std::uint64_t bytes = 0);
  // A free / unregister of `ptr` went through: no longer kept.
  void forget_kept(std::vector<DevicePtr>& kept, DevicePtr ptr);

  GpuBackend& inner_;
  mutable std::mutex mutex_;
  std::array<std::uint64_t, kFaultOpCount> calls_{};
  bool armed_ = false;
  bool tripped_ = false;  // from_then_on: the device is "lost"
  FaultOp op_ = FaultOp::allocate;
  std::uint64_t nth_ = 0;
  Fault mode_ = Fault::once;
  std::optional<Error> error_;
  std::vector<InjectedFault> injected_;
  std::vector<DevicePtr> kept_allocations_;
  std::vector<DevicePtr> kept_registrations_;
};

}  // namespace ballast::testing
