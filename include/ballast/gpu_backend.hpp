// GpuBackend: the one device interface every vendor implements.
// Device pointers are uint64_t addresses (see derivation.hpp), so callers
// never care which vendor they run on. No method throws.
#pragma once

#include <ballast/export.hpp>
#include <ballast/derivation.hpp>
#include <ballast/status.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

BALLAST_API_BEGIN

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
  // Whether a CPU read of registered host memory by the device happens in a
  // thread where ballast's SIGBUS guard can answer a page a truncated file
  // lost. false for a device run by threads that block SIGBUS (lavapipe:
  // Mesa's worker threads block every signal but SIGSEGV and SIGSYS, and
  // the kernel kills a process whose faulting thread blocks the signal,
  // whatever handler is installed). DeviceWeights then uploads a mapped
  // file's weights instead of registering them, unless the engine opts in
  // (DeviceWeightsOptions::register_unguarded). GPUs read registrations by
  // DMA from pages their driver pinned: nothing faults on the host.
  bool guarded_host_reads = true;
};

struct AllocationCounters {
  std::uint64_t live_allocations = 0;
  std::uint64_t live_bytes = 0;
  std::uint64_t live_registrations = 0;
};

enum class HostAccess : std::uint8_t { read_only, read_write };

// What a backend returns for an allocation or a host registration: the
// device pointer callers see, and a cookie of the backend's choosing (its
// own handle: a buffer object, a driver base address) that the core keeps
// beside the range and hands back in every later call about it, so no
// backend keeps a table of its own to find its ranges again.
struct BackendRange {
  DevicePtr ptr = 0;
  std::uint64_t cookie = 0;
};

// One operand as the core resolved it against its record of live ranges:
// `ptr` is absolute (offsets added), `cookie` belongs to the allocation or
// registration holding it, `offset` is `ptr` minus that range's pointer.
// An operand of zero bytes (unused by a launch) is all zero but `ptr`.
struct ResolvedOperand {
  DevicePtr ptr = 0;
  std::uint64_t cookie = 0;
  std::uint64_t offset = 0;
};

// A launch's five operands, resolved (see DerivationLaunch).
struct LaunchOperands {
  ResolvedOperand src, scales, zero_point, dst, dst2;
};

namespace detail {
class BALLAST_HIDDEN LiveRanges;
}

// Validation lives here, once, in front of every backend: each public
// method is non-virtual, checks its arguments against the ranges this
// object handed out (sizes from derivation_sizes, operand alignment,
// every operand inside a live allocation or registration, outputs
// overlapping nothing, read-only registrations never written), and only
// then calls the backend's private do_* implementation. So every backend
// refuses the same calls with the same error code and wording, and a
// backend author writes only the device work (docs/plugins.md).
//
// Threads: every method may be called from several threads at once; each
// backend serializes its own device work (conformance `threads` checks it
// on every backend). Ordering across threads is the engine's: a kernel one
// thread launches reads what another thread's copy has finished writing
// only if the engine waited for that copy first.
class GpuBackend {
 public:
  virtual ~GpuBackend();
  GpuBackend(const GpuBackend&) = delete;
  GpuBackend& operator=(const GpuBackend&) = delete;

  const DeviceInfo& info() const { return do_info(); }
  const Capabilities& capabilities() const { return do_capabilities(); }

  // Zero bytes is valid and returns a unique, freeable pointer. `alignment`
  // is a power of two.
  Result<DevicePtr> allocate(std::uint64_t bytes, std::uint64_t alignment = 256);
  // `ptr` must be what allocate() returned: unknown pointers, interior
  // pointers, registrations and double frees are invalid_argument. On any
  // other error the allocation stays live (counted) and may be freed again.
  Status free(DevicePtr ptr);
  // Live allocations and registrations as this object recorded them.
  AllocationCounters counters() const;

  // `dst`/`src` device pointers may point inside an allocation or
  // registration; the whole range must lie inside one. copy_device refuses
  // overlapping source and destination (no vendor copy engine defines it).
  // Completion: copy_to_device and copy_to_host have finished when they
  // return, so the host span is the caller's again (reuse it, read it).
  // copy_device and launch are enqueued in call order and have finished
  // once synchronize() returns: synchronize before reading their results
  // on the host or freeing what they read.
  Status copy_to_device(DevicePtr dst, std::uint64_t dst_offset, std::span<const std::byte> src);
  Status copy_to_host(std::span<std::byte> dst, DevicePtr src, std::uint64_t src_offset);
  Status copy_device(DevicePtr dst, std::uint64_t dst_offset, DevicePtr src, std::uint64_t src_offset,
                     std::uint64_t bytes);

  // Zero-copy: kernels read [host, host+bytes) in place through the returned
  // pointer, which points at `host` itself even when the backend widened the
  // range to its import alignment. A backend without the capability returns
  // `unsupported`; it never copies silently. Registrations may overlap.
  Result<DevicePtr> register_host(const void* host, std::uint64_t bytes, HostAccess access);
  // Ends the most recent registration returned as `ptr`.
  Status unregister_host(DevicePtr ptr);
  // Ends the most recent registration returned as `ptr` that was made with
  // `bytes` and `access`: an owner that shares a start with another (two
  // DeviceWeights over one mapping planning other ranges; on the CPU the
  // pointer is the host address itself) ends its own registration in any
  // order, never the other's. invalid_argument when none matches.
  Status unregister_host(DevicePtr ptr, std::uint64_t bytes, HostAccess access);

  // Enqueues one derivation after the checks above.
  Status launch(const DerivationLaunch& launch);
  // Waits for all work; reports any error a launch left behind.
  Status synchronize();

  // A backend-specific extension by name (its plugin's get_proc_address,
  // plugin ABI 1.1); null when the backend has none of that name or
  // predates the hook. What the pointer is, is the extension's contract.
  void* extension(const char* name) { return name == nullptr ? nullptr : do_extension(name); }

 protected:
  GpuBackend();
  // Frees every live allocation and ends every registration (through
  // do_free / do_unregister_host), for a destructor that must leave the
  // device with nothing the caller leaked. Errors are dropped: a
  // destructor has nobody to tell, and counters() already told the owner.
  void release_live_ranges();

 private:
  // What a backend implements (inside libballast: the wrapper of a
  // plugin's C table, and test doubles; backends themselves implement
  // BackendDevice, plugin_abi.hpp, which mirrors these). Arguments arrive
  // validated and resolved: pointers are absolute (offsets added), ranges
  // lie inside what do_allocate or do_register_host returned, each with
  // that range's cookie, byte counts are non-zero. Errors need no backend
  // prefix: the caller adds "<backend>: <operation>".
  virtual const DeviceInfo& do_info() const = 0;
  virtual const Capabilities& do_capabilities() const = 0;
  virtual Result<BackendRange> do_allocate(std::uint64_t bytes, std::uint64_t alignment) = 0;
  // The allocation as do_allocate returned it. On error it must stay
  // usable (it stays live and counted).
  virtual Status do_free(const BackendRange& allocation, std::uint64_t bytes) = 0;
  virtual Status do_copy_to_device(const ResolvedOperand& dst, std::span<const std::byte> src) = 0;
  virtual Status do_copy_to_host(std::span<std::byte> dst, const ResolvedOperand& src) = 0;
  virtual Status do_copy_device(const ResolvedOperand& dst, const ResolvedOperand& src, std::uint64_t bytes) = 0;
  // Called only when capabilities() allow the access.
  virtual Result<BackendRange> do_register_host(const void* host, std::uint64_t bytes, HostAccess access) = 0;
  // The registration being ended, as do_register_host returned it.
  virtual Status do_unregister_host(const BackendRange& registration, std::uint64_t bytes, HostAccess access) = 0;
  // Called only when the launch writes at least one byte.
  virtual Status do_launch(const DerivationLaunch& launch, const DerivationSizes& sizes,
                           const LaunchOperands& operands) = 0;
  virtual Status do_synchronize() = 0;
  virtual void* do_extension(const char*) { return nullptr; }

  std::unique_ptr<detail::LiveRanges> live_;
};

}  // namespace ballast

BALLAST_API_END
