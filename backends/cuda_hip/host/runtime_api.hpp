// The few vendor runtime calls the CUDA+HIP backend needs, as a table of
// plain function pointers. The CUDA and HIP plugins each bind one to their
// runtime API (cuda_runtime_api.cpp, hip_runtime_api.cpp); everything above
// it (bookkeeping, errors, registration) is the single RuntimeBackend, and
// validation is the core's. Tests bind one to a host emulation.
#pragma once

#include "cuda_hip/device/kernel_args.hpp"

#include <ballast/status.hpp>

#include <array>
#include <cstdint>
#include <string>

namespace ballast::gpu {

// The vendor's error enum value; 0 is success for both CUDA and HIP.
using NativeCode = int;
inline constexpr NativeCode kNativeSuccess = 0;

enum class CopyKind : std::uint8_t { host_to_device, device_to_host, device_to_device };

struct NativeDevice {
  std::string name;
  std::array<std::uint8_t, 16> uuid{};
  std::string driver;  // the driver's (and runtime's) version, for bug reports
  std::uint64_t total_memory = 0;
  bool can_map_host_memory = false;
  bool read_only_registration = false;
};

// Every runtime call the backend makes, listed once: X(name, result, parameters).
// The table below and each vendor's binding (BALLAST_RUNTIME_API_BIND) are
// generated from it, so a call added here that a vendor lacks does not compile.
//   error_name          the vendor's name for a code, e.g. "cudaErrorMemoryAllocation"
//   classify            which ballast error a failed call maps to
//   is_sticky           errors after which the context is unusable: every later call fails
//   unavailable_reason  a one-line reason for `unavailable`, given device_count's failure
//   set_device          makes `index` current for the calling thread
//   enqueue             the kernel object's entry point (gpu/kernel_args.hpp)
#define BALLAST_RUNTIME_API_CALLS(X)                                                              \
  X(error_name, const char*, (NativeCode code))                                                   \
  X(classify, ErrorCode, (NativeCode code))                                                       \
  X(is_sticky, bool, (NativeCode code))                                                           \
  X(unavailable_reason, std::string, (NativeCode code))                                           \
  X(device_count, NativeCode, (int* count))                                                       \
  X(device_info, NativeCode, (int index, NativeDevice* out))                                      \
  X(set_device, NativeCode, (int index))                                                          \
  X(device_malloc, NativeCode, (std::uint64_t* ptr, std::uint64_t bytes))                         \
  X(device_free, NativeCode, (std::uint64_t ptr))                                                 \
  X(stream_create, NativeCode, (void** stream))                                                   \
  X(stream_destroy, NativeCode, (void* stream))                                                   \
  X(stream_synchronize, NativeCode, (void* stream))                                               \
  X(copy_async, NativeCode, (void* dst, const void* src, std::uint64_t bytes, CopyKind kind, void* stream)) \
  X(host_register, NativeCode, (const void* host, std::uint64_t bytes, bool read_only))          \
  X(host_unregister, NativeCode, (const void* host))                                              \
  X(host_device_pointer, NativeCode, (std::uint64_t* device, const void* host))                   \
  X(enqueue, int, (const KernelArgs& args, void* stream))

struct RuntimeApi {
  const char* backend = "";  // "cuda", "hip"
  // Host ranges handed to host_register are widened to this (1: any range).
  std::uint64_t import_alignment = 1;
  const char* registration_note = "";  // why read-only registration is missing, when it is

#define BALLAST_RUNTIME_API_MEMBER(name, result, parameters) result(*name) parameters = nullptr;
  BALLAST_RUNTIME_API_CALLS(BALLAST_RUNTIME_API_MEMBER)
#undef BALLAST_RUNTIME_API_MEMBER
};

// Fills every call of `api` from the functions of the same names in scope
// (a vendor's runtime file defines one function per entry of the list).
#define BALLAST_RUNTIME_API_BIND_ONE(name, result, parameters) api.name = name;
#define BALLAST_RUNTIME_API_BIND(api) BALLAST_RUNTIME_API_CALLS(BALLAST_RUNTIME_API_BIND_ONE)

}  // namespace ballast::gpu
