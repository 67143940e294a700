// The few runtime calls a vendor GPU backend needs, as a table of plain
// function pointers. The CUDA and HIP plugins each fill one in from their
// runtime API (backends/cuda/cuda_driver_api.cpp, backends/hip/
// hip_driver_api.cpp); everything above it (validation, bookkeeping,
// errors, registration) is the single RuntimeBackend. Tests fill one in
// with a host emulation.
#pragma once

#include "gpu/kernel_args.hpp"

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

struct DriverApi {
  const char* backend = "";  // "cuda", "hip"
  // Host ranges handed to host_register are widened to this (1: any range).
  std::uint64_t import_alignment = 1;
  const char* registration_note = "";  // why read-only registration is missing, when it is

  // The vendor's name for a code, e.g. "cudaErrorMemoryAllocation".
  const char* (*error_name)(NativeCode) = nullptr;
  // Which ballast error a failed call maps to (out_of_memory, device_error, ...).
  ErrorCode (*classify)(NativeCode) = nullptr;
  // Errors after which the context is unusable: every later call fails.
  bool (*is_sticky)(NativeCode) = nullptr;
  // A one-line reason for `unavailable`, given device_count's failure.
  std::string (*unavailable_reason)(NativeCode) = nullptr;

  NativeCode (*device_count)(int* count) = nullptr;
  NativeCode (*device_info)(int index, NativeDevice* out) = nullptr;
  // Makes `index` current for the calling thread.
  NativeCode (*set_device)(int index) = nullptr;

  NativeCode (*malloc)(std::uint64_t* ptr, std::uint64_t bytes) = nullptr;
  NativeCode (*free)(std::uint64_t ptr) = nullptr;

  NativeCode (*stream_create)(void** stream) = nullptr;
  NativeCode (*stream_destroy)(void* stream) = nullptr;
  NativeCode (*stream_synchronize)(void* stream) = nullptr;
  NativeCode (*copy_async)(void* dst, const void* src, std::uint64_t bytes, CopyKind kind, void* stream) = nullptr;

  NativeCode (*host_register)(const void* host, std::uint64_t bytes, bool read_only) = nullptr;
  NativeCode (*host_unregister)(const void* host) = nullptr;
  NativeCode (*host_device_pointer)(std::uint64_t* device, const void* host) = nullptr;

  // The kernel object's entry point (gpu/kernel_args.hpp).
  int (*enqueue)(const KernelArgs& args, void* stream) = nullptr;
};

}  // namespace ballast::gpu
