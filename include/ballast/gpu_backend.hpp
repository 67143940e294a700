// GpuBackend: the one device interface every vendor implements.
// Device pointers are uint64_t addresses (see derivation.hpp), so callers
// never care which vendor they run on. No method throws.
#pragma once

#include <ballast/derivation.hpp>
#include <ballast/status.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace ballast {

struct DeviceInfo {
  std::string backend;       // "cpu", "cuda", "hip", "vulkan"
  int index = 0;             // position in the backend's device list
  std::string name;          // e.g. "NVIDIA H200", "llvmpipe (LLVM 15.0.6, 256 bits)"
  std::string uuid;          // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  std::string driver;        // e.g. "CUDA driver 13.0, runtime 13.0", "llvmpipe: Mesa 22.3.6 (LLVM 15.0.6)"
  std::uint64_t memory_bytes = 0;
};

struct Capabilities {
  bool host_registration = false;            // register_host works at all
  bool read_only_registration = false;       // ...and honours HostAccess::read_only
  std::uint64_t import_alignment = 1;        // host ranges are widened to this internally
  std::uint64_t max_single_allocation = 0;   // largest allocate() that can succeed
  bool flushes_f16_subnormals = false;       // to_f16 may flush subnormal results to zero
  bool int8_codes_within_one = false;        // quant_int8 codes may be one off the correctly rounded
                                             // (ties-to-even) code; otherwise they are exact
  bool unaligned_operands = false;           // kernels take operands at any byte address; otherwise
                                             // each must be aligned to its element size (check_operand_alignment)
  std::string host_registration_note;        // why registration is missing, when it is
};

struct AllocationCounters {
  std::uint64_t live_allocations = 0;
  std::uint64_t live_bytes = 0;
  std::uint64_t live_registrations = 0;
};

enum class HostAccess : std::uint8_t { read_only, read_write };

class GpuBackend {
 public:
  virtual ~GpuBackend() = default;

  virtual const DeviceInfo& info() const = 0;
  virtual const Capabilities& capabilities() const = 0;

  // Zero bytes is valid and returns a unique, freeable pointer.
  virtual Result<DevicePtr> allocate(std::uint64_t bytes, std::uint64_t alignment = 256) = 0;
  // Unknown pointers and double frees are invalid_argument errors.
  virtual Status free(DevicePtr ptr) = 0;
  virtual AllocationCounters counters() const = 0;

  // `dst`/`src` device pointers may point inside an allocation or registration.
  virtual Status copy_to_device(DevicePtr dst, std::uint64_t dst_offset, std::span<const std::byte> src) = 0;
  virtual Status copy_to_host(std::span<std::byte> dst, DevicePtr src, std::uint64_t src_offset) = 0;
  virtual Status copy_device(DevicePtr dst, std::uint64_t dst_offset, DevicePtr src, std::uint64_t src_offset,
                             std::uint64_t bytes) = 0;

  // Zero-copy: kernels read [host, host+bytes) in place through the returned
  // pointer, which points at `host` itself even when the backend widened the
  // range to its import alignment. A backend without the capability returns
  // `unsupported`; it never copies silently.
  virtual Result<DevicePtr> register_host(const void* host, std::uint64_t bytes, HostAccess access) = 0;
  virtual Status unregister_host(DevicePtr ptr) = 0;

  // Enqueues one derivation; validates it with derivation_sizes() first.
  virtual Status launch(const DerivationLaunch& launch) = 0;
  // Waits for all work; reports any error a launch left behind.
  virtual Status synchronize() = 0;
};

}  // namespace ballast
