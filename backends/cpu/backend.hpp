// The CPU device: a BackendDevice whose device pointers are host addresses.
#pragma once

#include "allocator.hpp"
#include "kernels.hpp"
#include "thread_pool.hpp"

#include <ballast/plugin_abi.hpp>

#include <cstdint>
#include <optional>

namespace ballast::cpu {

struct DeviceOptions {
  unsigned threads = 0;   // 0: every hardware thread this process may use
  bool simd = true;       // false: the portable kernels even where vector ones exist
  bool avx512 = true;     // false: no AVX-512 forms even where the CPU has them (simd=avx2)
  // Bytes of freed large blocks kept mapped for reuse (allocator.hpp says
  // why); unset: the plugin's default, 1 GiB or 1/16 of memory if less.
  std::optional<std::uint64_t> retain_bytes;
};

// An extension (GpuBackend::extension, plugin ABI 1.1): the name of the
// kernel set in use, as a NUL-terminated `const char*`, for the CPU tests.
inline constexpr const char* kKernelSetExtension = "ballast_cpu_kernel_set";

class CpuDevice final : public BackendDevice {
 public:
  CpuDevice(DeviceInfo info, Capabilities caps, const DeviceOptions& options);

  const char* kernel_set() const { return kernels_->name; }
  unsigned threads() const { return pool_.threads(); }

 private:
  const DeviceInfo& do_info() const override { return info_; }
  const Capabilities& do_capabilities() const override { return caps_; }
  Result<BackendRange> do_allocate(std::uint64_t bytes, std::uint64_t alignment) override;
  Status do_free(const BackendRange& allocation, std::uint64_t bytes) override;
  Status do_copy_to_device(const ResolvedOperand& dst, std::span<const std::byte> src) override;
  Status do_copy_to_host(std::span<std::byte> dst, const ResolvedOperand& src) override;
  Status do_copy_device(const ResolvedOperand& dst, const ResolvedOperand& src, std::uint64_t bytes) override;
  // Registration is the identity: kernels read the caller's memory (a
  // read-only mmap, typically) in place.
  Result<BackendRange> do_register_host(const void* host, std::uint64_t bytes, HostAccess access) override;
  Status do_unregister_host(const BackendRange&, std::uint64_t, HostAccess) override { return {}; }
  Status do_launch(const DerivationLaunch& launch, const DerivationSizes& sizes, const LaunchOperands&) override;
  // Launches run to completion inside launch(), so there is never anything
  // left to wait for.
  Status do_synchronize() override { return {}; }
  void* do_extension(const char* name) override;
  // memcpy on every thread for large disjoint ranges, memmove otherwise.
  void copy(std::byte* dst, const std::byte* src, std::uint64_t bytes);

  DeviceInfo info_;
  Capabilities caps_;
  const RowKernels* kernels_;
  Allocator allocator_;
  mutable ThreadPool pool_;
};

}  // namespace ballast::cpu
