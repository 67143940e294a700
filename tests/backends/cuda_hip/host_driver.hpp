// A RuntimeApi whose "device" is this process's memory, for testing the one
// host-side implementation (RuntimeBackend, RuntimePlugin) without a GPU.
// Kernels run through host_kernels.hpp; any call can be made to fail once
// with a chosen native code; registered host memory appears at a shifted
// device address, as it may on a real GPU, so base + offset arithmetic is
// actually exercised.
#pragma once

#include "cuda_hip/host/runtime_api.hpp"

#include <cstddef>
#include <cstdint>

namespace ballast::gpu::testing {

enum class Op : int {
  device_count, device_info, set_device, malloc, free, stream_create, stream_synchronize,
  copy, host_register, host_unregister, host_device_pointer, enqueue, count_
};

// The emulated runtime's error codes (names: hostErrorInvalidValue, ...).
inline constexpr NativeCode kInvalidValue = 1;
inline constexpr NativeCode kOutOfMemory = 2;
inline constexpr NativeCode kNoDevice = 100;
inline constexpr NativeCode kIllegalAddress = 700;  // sticky
inline constexpr NativeCode kAlreadyRegistered = 712;

inline constexpr std::uint64_t kRegistrationShift = std::uint64_t{1} << 44;

struct HostDriver {
  static const RuntimeApi& api();
  // Forget injected failures and counts; `devices` devices from now on.
  static void reset(int devices = 1, bool read_only_registration = true);
  static void fail_next(Op op, NativeCode code);
  static int calls(Op op);
  static std::size_t live_allocations();
  static std::size_t live_registrations();
};

}  // namespace ballast::gpu::testing
