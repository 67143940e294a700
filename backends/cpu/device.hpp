// The CPU device: a GpuBackend whose device pointers are host addresses.
#pragma once

#include "allocator.hpp"
#include "kernels.hpp"
#include "registrations.hpp"
#include "thread_pool.hpp"

#include <ballast/gpu_backend.hpp>

namespace ballast::cpu {

struct DeviceOptions {
  unsigned threads = 0;   // 0: every hardware thread this process may use
  bool simd = true;       // false: the portable kernels even where vector ones exist
};

class CpuDevice final : public GpuBackend {
 public:
  CpuDevice(DeviceInfo info, Capabilities caps, const DeviceOptions& options);

  const DeviceInfo& info() const override { return info_; }
  const Capabilities& capabilities() const override { return caps_; }

  Result<DevicePtr> allocate(std::uint64_t bytes, std::uint64_t alignment) override;
  Status free(DevicePtr ptr) override;
  AllocationCounters counters() const override;

  Status copy_to_device(DevicePtr dst, std::uint64_t dst_offset, std::span<const std::byte> src) override;
  Status copy_to_host(std::span<std::byte> dst, DevicePtr src, std::uint64_t src_offset) override;
  Status copy_device(DevicePtr dst, std::uint64_t dst_offset, DevicePtr src, std::uint64_t src_offset,
                     std::uint64_t bytes) override;

  Result<DevicePtr> register_host(const void* host, std::uint64_t bytes, HostAccess access) override;
  Status unregister_host(DevicePtr ptr) override;

  Status launch(const DerivationLaunch& launch) override;
  // Launches run to completion inside launch(), so there is never anything
  // left to wait for.
  Status synchronize() override { return {}; }

  const char* kernel_set() const { return kernels_->name; }
  unsigned threads() const { return pool_.threads(); }

 private:
  // Checks that [ptr + offset, +bytes) may be read (or written) by this
  // backend; `what` names the operand in the error.
  Status check_range(const char* what, DevicePtr ptr, std::uint64_t offset, std::uint64_t bytes, bool write) const;

  DeviceInfo info_;
  Capabilities caps_;
  const RowKernels* kernels_;
  Allocator allocator_;
  Registrations registrations_;
  mutable ThreadPool pool_;
};

}  // namespace ballast::cpu
