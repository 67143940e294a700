// VulkanBackend: the GpuBackend over one Vulkan device.
//
// Options (config string `vulkan[:device]?key=value`):
//   validation=on|off   Khronos validation layer; every message becomes an error
//   max_workgroups=N    cap on workgroups per dispatch (exercises splitting)
#pragma once

#include "device.hpp"
#include "kernels.hpp"
#include "transfer.hpp"
#include "validation.hpp"

#include <ballast/backend_registry.hpp>
#include <ballast/gpu_backend.hpp>

#include <memory>
#include <mutex>

namespace ballast::vulkan {

class VulkanBackend final : public GpuBackend {
 public:
  static Result<std::unique_ptr<VulkanBackend>> open(const BackendConfig& config);
  ~VulkanBackend() override;

  const DeviceInfo& info() const override { return device_->physical().info; }
  const Capabilities& capabilities() const override { return capabilities_; }

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
  Status synchronize() override;

  // For the plugin's own tests.
  bool validation_enabled() const { return log_ != nullptr; }
  std::uint64_t validation_messages() const { return log_ ? log_->message_count() : 0; }
  // Outlives the backend, so tests can count messages raised at teardown.
  std::shared_ptr<const ValidationLog> validation_log() const { return log_; }
  std::uint32_t max_groups_per_dispatch() const { return kernels_->max_groups(); }

 private:
  VulkanBackend() = default;
  // The validation message an earlier call left behind, if any.
  Status pending_validation_error();
  Status check_memory_object_limit() const;
  Result<BufferRange> resolve(DevicePtr ptr, std::uint64_t offset, std::uint64_t bytes, std::string_view operand,
                              bool writes) const;

  // Declaration order is destruction order, reversed: the log outlives the
  // instance that reports into it, the device outlives every buffer.
  std::shared_ptr<ValidationLog> log_;
  std::unique_ptr<Instance> instance_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<Queue> queue_;
  std::unique_ptr<Kernels> kernels_;
  Capabilities capabilities_;
  mutable std::mutex mutex_;
  BufferMap buffers_;
};

// Devices visible through a plain instance (no validation), for listings.
Result<std::vector<DeviceInfo>> list_devices();

}  // namespace ballast::vulkan
