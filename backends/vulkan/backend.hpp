// VulkanBackend: the device behind the Vulkan plugin (a BackendDevice, so
// the core's checks stand in front of it). Each allocation's and
// registration's cookie is its Buffer record, so no table of buffers is
// kept here: the core hands the record back with every operand.
//
// Options (config string `vulkan[:device]?key=value`):
//   validation=on|off   Khronos validation layer; every message becomes an error
//   max_workgroups=N    cap on workgroups per dispatch (exercises splitting)
//   max_allocation=N    replaces the largest single allocation ballast allows
//   max_memory_allocations=N  caps live VkDeviceMemory objects below the
//                       driver's maxMemoryAllocationCount
#pragma once

#include "device.hpp"
#include "kernels.hpp"
#include "memory_objects.hpp"
#include "suballocator.hpp"
#include "transfer.hpp"
#include "validation.hpp"

#include <ballast/backend_registry.hpp>
#include <ballast/plugin_abi.hpp>

#include <memory>
#include <mutex>

namespace ballast::vulkan {

class VulkanBackend final : public BackendDevice {
 public:
  static Result<std::unique_ptr<VulkanBackend>> open(const BackendConfig& config);
  ~VulkanBackend() override;

  // For the plugin's own tests.
  bool validation_enabled() const { return log_ != nullptr; }
  std::uint64_t validation_messages() const { return log_ ? log_->message_count() : 0; }
  // Outlives the backend, so tests can count messages raised at teardown.
  std::shared_ptr<const ValidationLog> validation_log() const { return log_; }
  std::uint32_t max_groups_per_dispatch() const { return kernels_->max_groups(); }
  // The VkDeviceMemory objects this backend holds (blocks, imports, the
  // staging buffer): now, at most ever, and the limit it keeps to.
  struct MemoryObjectCount {
    std::uint64_t live = 0, peak = 0, limit = 0;
    std::uint64_t blocks = 0;  // of them, sub-allocator blocks
  };
  MemoryObjectCount memory_objects() const;

 private:
  VulkanBackend() = default;
  // The validation message an earlier call left behind, if any.
  Status pending_validation_error();
  const DeviceInfo& do_info() const override { return device_->physical().info; }
  const Capabilities& do_capabilities() const override { return capabilities_; }
  Result<BackendRange> do_allocate(std::uint64_t bytes, std::uint64_t alignment) override;
  Status do_free(const BackendRange& allocation, std::uint64_t bytes) override;
  Status do_copy_to_device(const ResolvedOperand& dst, std::span<const std::byte> src) override;
  Status do_copy_to_host(std::span<std::byte> dst, const ResolvedOperand& src) override;
  Status do_copy_device(const ResolvedOperand& dst, const ResolvedOperand& src, std::uint64_t bytes) override;
  Result<BackendRange> do_register_host(const void* host, std::uint64_t bytes, HostAccess access) override;
  Status do_unregister_host(const BackendRange& registration, std::uint64_t bytes, HostAccess access) override;
  Status do_launch(const DerivationLaunch& launch, const DerivationSizes& sizes, const LaunchOperands& operands) override;
  Status do_synchronize() override;

  // Declaration order is destruction order, reversed: the log outlives the
  // instance that reports into it, the device outlives every buffer, the
  // count outlives the sub-allocator that reports into it.
  std::shared_ptr<ValidationLog> log_;
  std::unique_ptr<Instance> instance_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<Queue> queue_;
  std::unique_ptr<Kernels> kernels_;
  std::unique_ptr<MemoryObjects> memory_objects_;
  std::unique_ptr<SubAllocator> suballocator_;
  Capabilities capabilities_;
  mutable std::mutex mutex_;
};

// Devices visible through a plain instance (no validation), for listings.
Result<std::vector<DeviceInfo>> list_devices();

}  // namespace ballast::vulkan
